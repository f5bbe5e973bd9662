"""The Airflow plugin of the "lakeFS publications" view, registered by the ``airflow.plugins`` entry
point only: listed in the provider info as well, it would be registered twice where Airflow reads
providers' plugins (``lazy_discover_providers = False``), and Airflow 3.3's Task SDK stops registering
a batch of plugins at the first name it has seen (``return``, not ``continue``), which drops the
plugins after it, OpenLineage's listener among them.

It mounts :func:`airflow_lakefence.ui.app.create_app` at :data:`~airflow_lakefence.ui.URL_PREFIX`
(Airflow 3.0+) and, on Airflow 3.1+, adds the view to the UI on the task instance, the task, the DAG
and in the navigation ("Browse"):

* as React apps (``react_apps``): the bundle :mod:`airflow_lakefence.ui.bundle` serves, drawn inside
  Airflow's page with the route's DAG, run, task and map index, reading the JSON API with the user's
  session;
* or, with ``[lakefence] publications_view = html`` or a package without the bundle, as external
  views (``external_views``): the server-rendered page in a frame.

On Airflow 3.0 only the app is mounted (no UI plugin slots: the extra link opens the HTML page).
Airflow 2.11 mounts no FastAPI app: there the plugin adds a Flask AppBuilder view
(:mod:`~airflow_lakefence.ui.fab`) serving the same page at the same paths, and imports nothing of
Airflow 3 (nor Flask AppBuilder on Airflow 3).
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from airflow.plugins_manager import AirflowPlugin
from packaging.version import Version

from airflow_lakefence.ui import URL_PREFIX

_AIRFLOW = Version(importlib.metadata.version("apache-airflow")).release
#: Airflow's API server mounts a plugin's FastAPI apps from 3.0.
SERVES_APP = _AIRFLOW >= (3, 0)
#: The UI shows external views and React apps from 3.1; on 3.0 the extra link opens the page.
SHOWS_VIEWS = _AIRFLOW >= (3, 1)
_VIEW = f"{URL_PREFIX}/view"
#: One name for every slot: the UI keeps a loaded bundle's component under its app's name, and imports
#: the bundle's URL once, so a second name would find nothing.
NAME = "lakeFS publications"
#: Where the view appears, by destination: its route in the UI and the HTML page's query.
_SLOTS = (
    (
        "task_instance",
        "lakefence_publications_task_instance",
        "?dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}&map_index={MAP_INDEX}",
    ),
    ("task", "lakefence_publications_task", "?dag_id={DAG_ID}&task_id={TASK_ID}"),
    ("dag", "lakefence_publications_dag", "?dag_id={DAG_ID}"),
    ("nav", "lakefence_publications", ""),
)


def _slot(destination: str, route: str) -> dict[str, Any]:
    found = {"name": NAME, "destination": destination, "url_route": route}
    return {**found, "category": "browse"} if destination == "nav" else found


def _external_views() -> list[dict[str, Any]]:
    return [{**_slot(d, route), "href": f"{_VIEW}{query}"} for d, route, query in _SLOTS]


def _react_apps(bundle_url: str) -> list[dict[str, Any]]:
    return [{**_slot(d, route), "bundle_url": bundle_url} for d, route, _ in _SLOTS]


def ui_slots() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The plugin's ``(external_views, react_apps)``: the React view where the package has its bundle
    and ``[lakefence] publications_view`` is not ``html``, else the HTML page in frames."""
    if not SHOWS_VIEWS:
        return [], []
    from airflow.configuration import conf

    from airflow_lakefence.ui.bundle import bundle_url

    url = bundle_url()
    wanted = str(conf.get("lakefence", "publications_view", fallback="react")).strip().lower()
    if url is None or wanted == "html":
        return _external_views(), []
    return [], _react_apps(url)


def _appbuilder_views() -> list[dict[str, Any]]:
    from airflow_lakefence.ui.fab import appbuilder_views

    return appbuilder_views()


def _fastapi_apps() -> list[dict[str, Any]]:
    from airflow_lakefence.ui.app import create_app

    return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": NAME}]


class LakeFencePublicationsPlugin(AirflowPlugin):
    """The "lakeFS publications" view: its data app and where the UI shows it."""

    name = "lakefence_publications"
    fastapi_apps = _fastapi_apps() if SERVES_APP else []
    external_views, react_apps = ui_slots()
    appbuilder_views = [] if SERVES_APP else _appbuilder_views()
