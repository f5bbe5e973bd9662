"""The Airflow plugin of the "lakeFS publications" view, registered by the ``airflow.plugins`` entry
point only: listed in the provider info as well, it would be registered twice where Airflow reads
providers' plugins (``lazy_discover_providers = False``), and Airflow 3.3's Task SDK stops registering
a batch of plugins at the first name it has seen (``return``, not ``continue``), which drops the
plugins after it, OpenLineage's listener among them.

On Airflow 3.0 only the app is mounted (the extra link opens its page). Airflow 2.11 mounts no
FastAPI app: there the plugin adds a Flask AppBuilder view (:mod:`~airflow_lakefence.ui.fab`) serving
the same page at the same paths, and imports nothing of Airflow 3 (nor Flask AppBuilder on Airflow 3).
On Airflow 3 it mounts :func:`airflow_lakefence.ui.app.create_app` at :data:`~airflow_lakefence.ui.URL_PREFIX`
and adds the view to the UI as external views on the task instance, the task, the DAG and in the
navigation ("Browse"); the UI shows each in a frame, with the user's session.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from airflow.plugins_manager import AirflowPlugin
from packaging.version import Version

from airflow_lakefence.ui import URL_PREFIX

_AIRFLOW = Version(importlib.metadata.version("apache-airflow")).release
#: Airflow's API server mounts a plugin's FastAPI apps from 3.0 (tested on 3.3 only).
SERVES_APP = _AIRFLOW >= (3, 0)
#: The UI shows external views (in frames) from 3.1; on 3.0 the extra link opens the page.
SHOWS_VIEWS = _AIRFLOW >= (3, 1)
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
        {
            **common,
            "href": f"{_VIEW}?dag_id={{DAG_ID}}",
            "destination": "dag",
            "url_route": "lakefence_publications_dag",
        },
        {**common, "href": _VIEW, "destination": "nav", "category": "browse", "url_route": "lakefence_publications"},
    ]


def _appbuilder_views() -> list[dict[str, Any]]:
    from airflow_lakefence.ui.fab import appbuilder_views

    return appbuilder_views()


def _fastapi_apps() -> list[dict[str, Any]]:
    from airflow_lakefence.ui.app import create_app

    return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "lakeFS publications"}]


class LakeFencePublicationsPlugin(AirflowPlugin):
    """The "lakeFS publications" view: its data app and where the UI shows it."""

    name = "lakefence_publications"
    fastapi_apps = _fastapi_apps() if SERVES_APP else []
    external_views = _external_views() if SHOWS_VIEWS else []
    appbuilder_views = [] if SERVES_APP else _appbuilder_views()
