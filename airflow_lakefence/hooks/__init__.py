"""Hooks of airflow-lakefence."""

from airflow_lakefence.hooks.lakefs import LakeFSHook

__all__ = ["LakeFSHook"]
