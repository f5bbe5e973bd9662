"""The "lakeFS publications" view: a FastAPI app the Airflow API server mounts (Airflow 3.0+).

Two endpoints under the plugin's prefix (:data:`airflow_lakefence.ui.URL_PREFIX`):

* ``GET /api/publications`` - the rows as JSON;
* ``GET /view`` - the same rows as a server-rendered HTML page (what the UI shows in its external
  views on the task instance, the task, the DAG and in the navigation).

Both take ``dag_id``, ``task_id``, ``run_id``, ``map_index`` (a task instance, a task's runs, a DAG,
or, without ``dag_id``, every DAG the user may read), the filters ``repository``, ``branch`` and
``decision``, and ``offset``/``limit`` (task instances, newest run first); see
:func:`~airflow_lakefence.ui.page.read_page` for how the filters are applied.

Airflow does not protect a plugin's endpoints: each request is authenticated here through Airflow's
own ``get_user`` (the ``Authorization: Bearer`` header, or the UI's session cookie) and authorized
through the configured auth manager: an anonymous request gets 401, a user without read access to a
DAG's task instances gets 403 for that DAG and never sees its rows in the cross-DAG list.

Reading and rendering a page are :mod:`~airflow_lakefence.ui.page`'s, shared with Airflow 2.11's view
(:mod:`~airflow_lakefence.ui.fab`). The lakeFS connection is ``[lakefence] publications_conn_id``
(default ``lakefs_default``); its credentials stay in the API server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse

from airflow_lakefence.ui.bundle import add_bundle_route
from airflow_lakefence.ui.page import MAX_LIMIT, Page, filled, page_json, read_page, reader, render_page

# ``reader`` stays importable from here: the benchmark clears its cache through this module.
__all__ = ["PageParams", "create_app", "reader"]


def _readable_dag_ids(user: Any, dag_id: str | None) -> tuple[str, ...]:
    """The DAGs the request may show: ``dag_id`` if the user may read its task instances (else 403),
    or every DAG the user may read."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    manager = get_auth_manager()
    if dag_id is not None:
        allowed = manager.is_authorized_dag(
            method="GET", access_entity=DagAccessEntity.TASK_INSTANCE, details=DagDetails(id=dag_id), user=user
        )
        if not allowed:
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"no read access to the task instances of {dag_id!r}")
        return (dag_id,)
    return tuple(sorted(manager.get_authorized_dag_ids(user=user, method="GET")))


@dataclass
class PageParams:
    """The query parameters of a page, shared by the JSON API and the HTML view.

    :param dag_id: only this DAG's publications.
    :param task_id: only this task's.
    :param run_id: only this run's.
    :param map_index: only this map index's.
    :param repository: only publications into this repository.
    :param branch: only publications into this branch.
    :param decision: only rows with this decision (task instances without one are skipped before the
        page is cut; see :data:`~airflow_lakefence.ui.page.DECISION_SCAN_PAGES`).
    :param offset: the first task instance of the page, newest first.
    :param limit: how many task instances the page holds.
    """

    dag_id: str | None = None
    task_id: str | None = None
    run_id: str | None = None
    map_index: str | None = None
    repository: str | None = None
    branch: str | None = None
    decision: str | None = None
    offset: int = Query(0, ge=0)
    limit: int = Query(20, ge=1, le=MAX_LIMIT)


def _page(user: Any, params: PageParams) -> Page:
    """The page's rows (the decision filter applied before the page is cut) and what reading them cost."""
    query = {**vars(params), "map_index": _map_index(params.map_index)}
    return read_page(_readable_dag_ids(user, filled(params.dag_id)), query)


def _map_index(value: str | None) -> int | None:
    value = filled(value)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_ENTITY, f"map_index must be an integer, got {value!r}"
        ) from None


def create_app() -> FastAPI:
    """The app the plugin registers (``fastapi_apps``)."""
    app = FastAPI(title="lakeFence publications", description=__doc__)

    @app.get("/api/publications")
    def publications(user: GetUserDep, params: Annotated[PageParams, Depends()]) -> dict[str, Any]:
        """The publication history rows of a page (see the module's docstring)."""
        return page_json(_page(user, params), params.offset, params.limit)

    @app.get("/view", response_class=HTMLResponse)
    def view(request: Request, user: GetUserDep, params: Annotated[PageParams, Depends()]) -> HTMLResponse:
        """The rows as an HTML page."""
        page = _page(user, params)
        query = {k: v for k, v in request.query_params.items() if k != "offset"}
        return HTMLResponse(render_page(page, params.offset, params.limit, query))

    add_bundle_route(app)  # the React view's bundle (ui/bundle.py)
    return app
