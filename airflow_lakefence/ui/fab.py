"""The "lakeFS publications" view on Airflow 2.11: a Flask AppBuilder view in the webserver.

Airflow 2 mounts no FastAPI app; its plugins add Flask AppBuilder views (``appbuilder_views``). This
one serves, under :data:`~airflow_lakefence.ui.URL_PREFIX` as Airflow 3 does, the same page read
the same way (:mod:`~airflow_lakefence.ui.page`):

* ``GET /lakefence/view`` - the rows inside Airflow's own page (menu **Browse → lakeFS
  publications**; the extra link "lakeFS publications" opens a task instance's);
* ``GET /lakefence/api/publications`` - the same rows as JSON.

Both take the query parameters of Airflow 3's app: ``dag_id``, ``task_id``, ``run_id``,
``map_index``, ``repository``, ``branch``, ``decision``, ``offset``, ``limit``.

Permissions are the webserver's auth manager's (Flask AppBuilder's security manager, with Airflow's
default auth manager): a ``dag_id`` needs read access to the DAG (``can_read`` on ``DAG:<dag_id>`` or
on ``DAGs``) and to task instances, else 403; without a ``dag_id`` the page lists only the DAGs the
user may read. A request without a login (and no public role that grants the access) is sent to the
login page (the HTML view) or refused with 401 (the JSON API). lakeFS is read with the server's
connection; the browser gets rows and lakeFS UI URLs only.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from flask import Response, jsonify, redirect, render_template_string, request
from flask_appbuilder import BaseView, expose
from werkzeug.exceptions import Forbidden, HTTPException, Unauthorized, UnprocessableEntity

from airflow_lakefence.ui import URL_PREFIX
from airflow_lakefence.ui.page import MAX_LIMIT, filled, page_json, read_page, render_body

#: The menu entry's name and category (Airflow 2's "Browse" menu).
MENU_NAME = "lakeFS publications"
MENU_CATEGORY = "Browse"

_TEMPLATE = """{% extends base_template %}
{% block content %}
{% if scope %}<p id='lakefence-scope'>{% for text, href in scope %}{% if not loop.first %} · {% endif %}
{% if href %}<a href='{{ href }}'>{{ text }}</a>{% else %}<b>{{ text }}</b>{% endif %}{% endfor %}</p>{% endif %}
{{ body | safe }}
{% endblock %}
"""


def readable_dag_ids(dag_id: str | None) -> tuple[str, ...]:
    """The DAGs the current request may show: ``dag_id`` if the user may read its task instances, or
    every DAG the user may read.

    :param dag_id: one DAG, or ``None`` for all.
    :raises werkzeug.exceptions.Unauthorized: without a login (and no public access that allows it).
    :raises werkzeug.exceptions.Forbidden: without read access.
    """
    from airflow.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.www.extensions.init_auth_manager import get_auth_manager

    manager = get_auth_manager()
    details = None if dag_id is None else DagDetails(id=dag_id)
    if manager.is_authorized_dag(method="GET", access_entity=DagAccessEntity.TASK_INSTANCE, details=details):
        if dag_id is not None:
            return (dag_id,)
        return tuple(sorted(manager.get_permitted_dag_ids(methods=["GET"])))
    if not manager.is_logged_in():
        raise Unauthorized("log in to read lakeFS publications")
    what = "task instances" if dag_id is None else f"task instances of {dag_id!r}"
    raise Forbidden(f"no read access to the {what}")


def page_query(args: Any) -> dict[str, Any]:
    """The page a request asks for, checked as Airflow 3's app checks it.

    :param args: the request's query arguments.
    :raises werkzeug.exceptions.UnprocessableEntity: a map index, offset or limit that is not valid.
    """
    query: dict[str, Any] = {name: args.get(name) for name in ("task_id", "run_id", "repository", "branch", "decision")}
    try:
        map_index = filled(args.get("map_index"))
        query["map_index"] = None if map_index is None else int(map_index)
        query["offset"] = int(args.get("offset", 0))
        query["limit"] = int(args.get("limit", 20))
    except ValueError as exc:
        raise UnprocessableEntity(f"map_index, offset and limit are integers: {exc}") from None
    if query["offset"] < 0 or not 1 <= query["limit"] <= MAX_LIMIT:
        raise UnprocessableEntity(f"offset must be >= 0 and limit between 1 and {MAX_LIMIT}")
    return query


def _scope(args: Any) -> list[tuple[str, str | None]]:
    """Where the page sits (task instance, task, DAG, all DAGs), each wider view as a link."""
    view = f"{request.script_root}{URL_PREFIX}/view"
    dag_id, task_id, run_id = (filled(args.get(k)) for k in ("dag_id", "task_id", "run_id"))
    steps: list[tuple[str, dict[str, str] | None]] = [("All DAGs", {})]
    if dag_id:
        steps.append((f"DAG {dag_id}", {"dag_id": dag_id}))
        if task_id:
            steps.append((f"task {task_id}, all runs", {"dag_id": dag_id, "task_id": task_id}))
            if run_id:
                steps.append((f"run {run_id}", None))
    last = len(steps) - 1
    return [
        (text, None if i == last or params is None else f"{view}?{urllib.parse.urlencode(params)}")
        for i, (text, params) in enumerate(steps)
    ]


class PublicationsView(BaseView):  # type: ignore[misc]
    """The view (Flask AppBuilder): its HTML page and JSON API, each request checked with the
    webserver's auth manager."""

    route_base = URL_PREFIX
    default_view = "view"

    @expose("/view")  # type: ignore[untyped-decorator]
    def view(self) -> Any:
        """The rows inside Airflow's page."""
        try:
            dag_ids = readable_dag_ids(filled(request.args.get("dag_id")))
            query = page_query(request.args)
        except Unauthorized:
            from airflow.www.extensions.init_auth_manager import get_auth_manager

            return redirect(get_auth_manager().get_url_login(next_url=request.url))
        except HTTPException as refused:
            return Response(refused.description, status=refused.code, mimetype="text/plain")
        page = read_page(dag_ids, query)
        params = {k: v for k, v in request.args.items() if k != "offset"}
        body = render_body(page, query["offset"], query["limit"], params)
        return render_template_string(
            _TEMPLATE,
            title=MENU_NAME,
            body=body,
            scope=_scope(request.args),
            base_template=self.appbuilder.base_template,
            appbuilder=self.appbuilder,
        )

    @expose("/api/publications")  # type: ignore[untyped-decorator]
    def publications(self) -> Any:
        """The rows as JSON (Airflow 3's answer, field for field)."""
        try:
            dag_ids = readable_dag_ids(filled(request.args.get("dag_id")))
            query = page_query(request.args)
        except HTTPException as refused:
            answer = jsonify({"detail": refused.description})
            answer.status_code = refused.code
            return answer
        page = read_page(dag_ids, query)
        return jsonify(page_json(page, query["offset"], query["limit"]))


def appbuilder_views() -> list[dict[str, Any]]:
    """What the plugin gives Airflow 2's webserver (``appbuilder_views``)."""
    return [{"name": MENU_NAME, "category": MENU_CATEGORY, "view": PublicationsView()}]
