"""Sensors of airflow-lakefence (all support ``deferrable=True`` and ``mode="reschedule"``)."""

from airflow_lakefence.sensors.abandoned import AbandonedPublicationSensor
from airflow_lakefence.sensors.lakefs import LakeFSCommitSensor, LakeFSFileSensor

__all__ = ["AbandonedPublicationSensor", "LakeFSCommitSensor", "LakeFSFileSensor"]
