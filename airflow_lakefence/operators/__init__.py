"""Operators of airflow-lakefence."""

from airflow_lakefence.core.request import PublishOptions
from airflow_lakefence.operators.cleanup import LakeFSStagingCleanupOperator
from airflow_lakefence.operators.fenced_python import FencedPythonPublishOperator
from airflow_lakefence.operators.fenced_spark import FencedSparkPublishOperator
from airflow_lakefence.operators.resolve_ref import LakeFSResolveRefOperator
from airflow_lakefence.operators.run_branch import LakeFSPublishRunOperator, LakeFSRunBranchOperator

__all__ = [
    "FencedPythonPublishOperator",
    "FencedSparkPublishOperator",
    "LakeFSPublishRunOperator",
    "LakeFSResolveRefOperator",
    "LakeFSRunBranchOperator",
    "LakeFSStagingCleanupOperator",
    "PublishOptions",
]
