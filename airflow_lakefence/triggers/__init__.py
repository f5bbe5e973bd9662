"""Triggers of airflow-lakefence's deferrable sensors."""

from airflow_lakefence.triggers.lakefs import AbandonedPublicationTrigger, LakeFSCommitTrigger, LakeFSFileTrigger

__all__ = ["AbandonedPublicationTrigger", "LakeFSCommitTrigger", "LakeFSFileTrigger"]
