"""airflow-lakefence: fenced publication of Spark output into lakeFS branches from Apache Airflow.

Importing the package is cheap and imports neither Airflow nor lakeFS: the public classes are
loaded on first access, so the local lakeFS server and the pure core work without Airflow.
"""

from __future__ import annotations

import importlib
from typing import Any

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
    "LakeFenceError": "airflow_lakefence.exceptions",
    "StaleAttemptError": "airflow_lakefence.exceptions",
    "PublishFenceError": "airflow_lakefence.exceptions",
    "PublishRaceError": "airflow_lakefence.exceptions",
    "PublishBudgetError": "airflow_lakefence.exceptions",
}

__all__ = ["__version__", "get_provider_info", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_provider_info() -> dict[str, Any]:
    """Describe the provider to Airflow (entry point ``apache_airflow_provider``)."""
    return {
        "package-name": "airflow-provider-lakefence",
        "name": "lakeFence",
        "description": "Fenced, retry-safe publication of Spark output into lakeFS branches.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "lakeFS",
                "external-doc-url": "https://docs.lakefs.io/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "lakeFS",
                "python-modules": [
                    "airflow_lakefence.operators.fenced_spark",
                    "airflow_lakefence.operators.fenced_python",
                    "airflow_lakefence.operators.resolve_ref",
                    "airflow_lakefence.operators.cleanup",
                    "airflow_lakefence.operators.run_branch",
                    "airflow_lakefence.operators.lakefs",
                ],
            }
        ],
        "task-decorators": [
            {"name": "lakefs_publish", "class-name": "airflow_lakefence.decorators.lakefs_publish.lakefs_publish_task"}
        ],
        "hooks": [{"integration-name": "lakeFS", "python-modules": ["airflow_lakefence.hooks.lakefs"]}],
        "sensors": [
            {
                "integration-name": "lakeFS",
                "python-modules": ["airflow_lakefence.sensors.abandoned", "airflow_lakefence.sensors.lakefs"],
            }
        ],
        "triggers": [{"integration-name": "lakeFS", "python-modules": ["airflow_lakefence.triggers.lakefs"]}],
        "connection-types": [
            {
                "connection-type": "lakefs",
                "hook-class-name": "airflow_lakefence.hooks.lakefs.LakeFSHook",
                "hook-name": "lakeFS",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "port"],
                    "relabeling": {
                        "host": "lakeFS endpoint URL",
                        "login": "Access key id",
                        "password": "Secret access key",
                    },
                    "placeholders": {
                        "host": "https://lakefs.example.com",
                        "login": "AKIAIOSFODNN7EXAMPLE",
                    },
                },
                "conn-fields": {
                    # The schema default is what the UI form shows and saves for an untouched
                    # field ("value" of the hook metadata); the hook reads null as the default too.
                    "verify_ssl": {
                        "label": "Verify TLS",
                        "description": "Verify the lakeFS server's TLS certificate (on by default).",
                        "schema": {"type": ["boolean", "null"], "default": True},
                    },
                    "ui_base_url": {
                        "label": "lakeFS UI base URL",
                        "description": "Base URL of the lakeFS UI for the task's links (default: the endpoint).",
                        "schema": {"type": ["string", "null"]},
                    },
                    "timeout": {
                        "label": "Request timeout (s, or [connect, read])",
                        "description": "Seconds each lakeFS request may take (default [10, 120]).",
                        "schema": {"type": ["number", "array", "string", "null"]},
                    },
                },
            }
        ],
        "extra-links": [
            "airflow_lakefence.links.LakeFSCommitLink",
            "airflow_lakefence.links.LakeFSOutputLink",
            "airflow_lakefence.links.LakeFSStagingLink",
            "airflow_lakefence.links.LakeFSSensorCommitLink",
        ],
        "asset-uris": [
            {
                "schemes": ["lakefs"],
                "handler": "airflow_lakefence.assets.sanitize_uri",
                "factory": "airflow_lakefence.assets.create_asset",
            }
        ],
    }
