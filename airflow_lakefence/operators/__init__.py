"""Operators of airflow-lakefence."""

from airflow_lakefence.core.request import PublishOptions
from airflow_lakefence.operators.cleanup import LakeFSStagingCleanupOperator
from airflow_lakefence.operators.fenced_python import FencedPythonPublishOperator
from airflow_lakefence.operators.fenced_spark import FencedSparkPublishOperator
from airflow_lakefence.operators.resolve_ref import LakeFSResolveRefOperator

__all__ = [
    "FencedPythonPublishOperator",
    "FencedSparkPublishOperator",
    "LakeFSResolveRefOperator",
    "LakeFSStagingCleanupOperator",
    "PublishOptions",
]
