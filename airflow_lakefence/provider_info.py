"""What the provider tells Airflow about itself (the ``apache_airflow_provider`` entry point)."""

from __future__ import annotations

from typing import Any

from airflow_lakefence import __version__


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
            "airflow_lakefence.links.lakefs.LakeFSCommitLink",
            "airflow_lakefence.links.lakefs.LakeFSOutputLink",
            "airflow_lakefence.links.lakefs.LakeFSStagingLink",
            "airflow_lakefence.links.lakefs.LakeFSPublicationsLink",
            "airflow_lakefence.links.lakefs.LakeFSSensorCommitLink",
        ],
        "asset-uris": [
            {
                "schemes": ["lakefs"],
                "handler": "airflow_lakefence.assets.lakefs.sanitize_uri",
                "factory": "airflow_lakefence.assets.lakefs.create_asset",
            }
        ],
    }
