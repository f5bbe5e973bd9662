"""TaskFlow decorators of airflow-lakefence (registered as ``@task.<name>`` by the provider info)."""

from airflow_lakefence.decorators.lakefs_publish import lakefs_publish_task

__all__ = ["lakefs_publish_task"]
