"""airflow-lakefence: fenced publication of Spark output into lakeFS branches from Apache Airflow.

Importing the package is cheap and imports neither Airflow nor lakeFS: the public classes are
loaded on first access, so the local lakeFS server and the pure core work without Airflow.
"""

from __future__ import annotations

import importlib
from typing import Any

from airflow_lakefence import _moved

__version__ = "0.1.0"

_LAZY = {
    "FencedSparkPublishOperator": "airflow_lakefence.operators.fenced_spark",
    "FencedPythonPublishOperator": "airflow_lakefence.operators.fenced_python",
    "PublishOptions": "airflow_lakefence.core.request",
    "LakeFSResolveRefOperator": "airflow_lakefence.operators.resolve_ref",
    "LakeFSStagingCleanupOperator": "airflow_lakefence.operators.cleanup",
    "LakeFSRunBranchOperator": "airflow_lakefence.operators.run_branch",
    "LakeFSPublishRunOperator": "airflow_lakefence.operators.run_branch",
    "AbandonedPublicationSensor": "airflow_lakefence.sensors.abandoned",
    "LakeFSCommitSensor": "airflow_lakefence.sensors.lakefs",
    "LakeFSFileSensor": "airflow_lakefence.sensors.lakefs",
    "LakeFSHook": "airflow_lakefence.hooks.lakefs",
    # The entry point of the last release named it here.
    "get_provider_info": "airflow_lakefence.provider_info",
    "LakeFenceError": "airflow_lakefence.exceptions",
    "StaleAttemptError": "airflow_lakefence.exceptions",
    "PublishFenceError": "airflow_lakefence.exceptions",
    "PublishRaceError": "airflow_lakefence.exceptions",
    "PublishBudgetError": "airflow_lakefence.exceptions",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_moved.install()
