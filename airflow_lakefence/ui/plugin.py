"""The Airflow plugin of the "lakeFS publications" view (Airflow 3.1+), registered through the
provider info's ``plugins`` entry (:data:`PROVIDER_PLUGINS`).

It mounts :func:`airflow_lakefence.ui.app.create_app` at :data:`~airflow_lakefence.ui.app.URL_PREFIX`
and adds the view to the UI as external views on the task instance, the task, the DAG and in the
navigation ("Browse"); the UI shows each in a frame, with the user's session.
"""

from __future__ import annotations

from typing import Any

import importlib.metadata

from airflow.plugins_manager import AirflowPlugin
from packaging.version import Version

#: Airflow mounts a plugin's FastAPI apps from 3.0 and shows external views in frames from 3.1.
SERVES_VIEW = Version(importlib.metadata.version("apache-airflow")).release >= (3, 1)
URL_PREFIX = "/lakefence"

_VIEW = f"{URL_PREFIX}/view"


def _external_views() -> list[dict[str, Any]]:
    common = {"name": "lakeFS publications"}
    return [
        {
            **common,
            "href": f"{_VIEW}?dag_id={{DAG_ID}}&run_id={{RUN_ID}}&task_id={{TASK_ID}}&map_index={{MAP_INDEX}}",
            "destination": "task_instance",
            "url_route": "lakefence_publications_task_instance",
        },
        {
            **common,
            "href": f"{_VIEW}?dag_id={{DAG_ID}}&task_id={{TASK_ID}}",
            "destination": "task",
            "url_route": "lakefence_publications_task",
        },
        {**common, "href": f"{_VIEW}?dag_id={{DAG_ID}}", "destination": "dag", "url_route": "lakefence_publications_dag"},
        {**common, "href": _VIEW, "destination": "nav", "category": "browse", "url_route": "lakefence_publications"},
    ]


def _fastapi_apps() -> list[dict[str, Any]]:
    from airflow_lakefence.ui.app import create_app

    return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "lakeFS publications"}]


class LakeFencePublicationsPlugin(AirflowPlugin):
    """The "lakeFS publications" view: its data app and where the UI shows it."""

    name = "lakefence_publications"
    fastapi_apps = _fastapi_apps() if SERVES_VIEW else []
    external_views = _external_views() if SERVES_VIEW else []
