"""The "lakeFS publications" view: a FastAPI app the Airflow API server mounts (Airflow 3.1+).

Two endpoints under the plugin's prefix (:data:`airflow_lakefence.ui.URL_PREFIX`):

* ``GET /api/publications`` - the rows as JSON;
* ``GET /view`` - the same rows as a server-rendered HTML page (what the UI shows in its external
  views on the task instance, the task, the DAG and in the navigation).

Both take ``dag_id``, ``task_id``, ``run_id``, ``map_index`` (a task instance, a task's runs, a DAG,
or, without ``dag_id``, every DAG the user may read), the filters ``repository``, ``branch`` and
``decision``, and ``offset``/``limit`` (task instances, newest run first). ``repository`` and
``branch`` select task instances in Airflow's database by where each one published (its own rendered
fields). ``decision`` lives in lakeFS: a filtered page reads up to :data:`DECISION_SCAN_PAGES` pages
of task instances, keeps those with a row of that decision until ``limit`` are found, and says where
to go on (``next_offset``).

Airflow does not protect a plugin's endpoints: each request is authenticated here through Airflow's
own ``get_user`` (the ``Authorization: Bearer`` header, or the UI's session cookie) and authorized
through the configured auth manager: an anonymous request gets 401, a user without read access to a
DAG's task instances gets 403 for that DAG and never sees its rows in the cross-DAG list.

The lakeFS connection is ``[lakefence] publications_conn_id`` (default ``lakefs_default``); its
credentials stay in the API server.
"""

from __future__ import annotations

import html
import urllib.parse
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse

from airflow_lakefence.core.publication.history import DECISION_REASONS, PublicationRow
from airflow_lakefence.ui.bundle import add_bundle_route
from airflow_lakefence.ui.reader import CACHE_SECONDS, HistoryReader, PageResult
from airflow_lakefence.ui.source import PageQuery, task_instance_page

#: The most task instances one page shows.
MAX_LIMIT = 100
#: The most pages of task instances a page filtered by ``decision`` reads (the decision is in lakeFS).
DECISION_SCAN_PAGES = 5


def _conf(name: str, fallback: str) -> str:
    from airflow.configuration import conf

    return str(conf.get("lakefence", name, fallback=fallback))


@lru_cache(maxsize=4)
def _reader(conn_id: str) -> tuple[HistoryReader, str]:
    from airflow_lakefence.hooks.lakefs import LakeFSHook

    hook = LakeFSHook(lakefs_conn_id=conn_id)
    return HistoryReader(hook.client), str(hook.settings["ui_base_url"])


def reader() -> tuple[HistoryReader, str]:
    """The history reader of the configured connection, and the lakeFS UI base URL."""
    return _reader(_conf("publications_conn_id", "lakefs_default"))


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
        page is cut; see :data:`DECISION_SCAN_PAGES`).
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


@dataclass
class Page:
    """What one request shows, and what reading it cost.

    :param rows: the rows (the decision filter applied).
    :param result: what was read (every page read when filtering by decision, summed).
    :param total: task instances in all (without the decision filter).
    :param ui_base: the lakeFS UI base URL.
    :param next_offset: the offset of the next page (``None``: no more task instances).
    :param scanned: task instances read.
    """

    rows: list[PublicationRow]
    result: PageResult
    total: int
    ui_base: str
    next_offset: int | None
    scanned: int


def _page(user: Any, params: PageParams) -> Page:
    """The page's rows, the decision filter applied before the page is cut."""
    from airflow.utils.session import create_session

    dag_ids = _readable_dag_ids(user, _filled(params.dag_id))
    history, ui_base = reader()
    staging_prefix = _conf("publications_staging_prefix", "lakefence")
    decision = _filled(params.decision)
    rows: list[PublicationRow] = []
    results: list[PageResult] = []
    offset, found, scanned, total = params.offset, 0, 0, 0
    next_offset: int | None = None
    for _round in range(DECISION_SCAN_PAGES if decision else 1):
        query = PageQuery(
            dag_ids,
            _filled(params.task_id),
            _filled(params.run_id),
            _map_index(params.map_index),
            _filled(params.repository),
            _filled(params.branch),
            offset,
            params.limit,
        )
        with create_session() as session:
            facts, total = task_instance_page(session, query, staging_prefix)
        result = history.read(facts)
        results.append(result)
        next_offset = offset + len(facts) if offset + len(facts) < total else None
        for index, ti in enumerate(facts):
            ident = (ti.key.dag_id, ti.key.run_id, ti.key.task_id, ti.key.map_index)
            own = [r for r in result.rows if (r.dag_id, r.run_id, r.task_id, r.map_index) == ident]
            matching = [r for r in own if decision is None or r.decision == decision]
            scanned += 1
            if matching:
                rows.extend(matching)
                found += 1
            if decision and found == params.limit:
                next_offset = offset + index + 1 if offset + index + 1 < total else None
                break
        if not decision or found == params.limit or next_offset is None:
            break
        offset = next_offset
    merged = PageResult(
        [r for res in results for r in res.rows],
        sum(r.calls for r in results),
        {k: v for r in results for k, v in r.errors.items()},
        sum(r.bound for r in results),
    )
    return Page(rows, merged, total, ui_base, next_offset, scanned)


def links(ui_base: str, row: PublicationRow) -> dict[str, str]:
    """The lakeFS UI pages of a row: its commits, the diff of its output against its input, its evidence.

    :param ui_base: the lakeFS UI base URL.
    :param row: the row.
    """
    from airflow_lakefence.links.lakefs import branch_url, commit_url

    found = {}
    for name in ("input_commit", "staged_commit", "output_ref"):
        value = getattr(row, name)
        if value:
            found[name] = commit_url(ui_base, row.repository, value)
    if row.output_ref and row.input_commit and row.output_ref != row.input_commit:
        query = urllib.parse.urlencode({"ref": row.input_commit, "compareRef": row.output_ref})
        found["compare"] = f"{ui_base}/repositories/{urllib.parse.quote(row.repository)}/compare?{query}"
    if row.replaced and isinstance(row.replaced.get("output_ref"), str):
        found["replaced"] = commit_url(ui_base, row.repository, row.replaced["output_ref"])
    for entry in row.evidence:
        if entry.kept:
            found[f"evidence:{entry.branch}"] = branch_url(ui_base, row.repository, entry.branch)
    if row.run_branch:
        found["run_branch"] = branch_url(ui_base, row.repository, row.run_branch)
    for task in row.run_tasks:
        for commit in task.commits:
            found[f"run_task:{commit}"] = commit_url(ui_base, row.repository, commit)
    return found


def _filled(value: str | None) -> str | None:
    """A query value, ``None`` for an empty one or a placeholder the UI left unfilled (``{MAP_INDEX}``
    on an unmapped task instance's page)."""
    if not value or (value.startswith("{") and value.endswith("}")):
        return None
    return value


def _map_index(value: str | None) -> int | None:
    value = _filled(value)
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
        page = _page(user, params)
        return {
            "rows": [{**r.to_dict(), "links": links(page.ui_base, r)} for r in page.rows],
            "total_task_instances": page.total,
            "offset": params.offset,
            "limit": params.limit,
            "next_offset": page.next_offset,
            "scanned_task_instances": page.scanned,
            "lakefs_calls": page.result.calls,
            "lakefs_calls_bound": page.result.bound,
            "cache_seconds": CACHE_SECONDS,
            "errors": page.result.errors,
        }

    @app.get("/view", response_class=HTMLResponse)
    def view(request: Request, user: GetUserDep, params: Annotated[PageParams, Depends()]) -> HTMLResponse:
        """The rows as an HTML page."""
        page = _page(user, params)
        query = {k: v for k, v in request.query_params.items() if k != "offset"}
        return HTMLResponse(
            render_page(
                page.rows, page.ui_base, page.total, params.offset, params.limit, page.result, query, page.next_offset
            )
        )

    add_bundle_route(app)  # the React view's bundle (ui/bundle.py)
    return app


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _code_link(url: str | None, text: str | None) -> str:
    if not text:
        return ""
    short = _e(text[:12])
    if not url:
        return f"<code title='{_e(text)}'>{short}</code>"
    return f"<a href='{_e(url)}' target='_blank' rel='noopener' title='{_e(text)}'><code>{short}</code></a>"


_STYLE = """
body{font-family:system-ui,sans-serif;font-size:13px;margin:12px;color:#1a202c}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #e2e8f0;padding:4px 6px;
text-align:left;vertical-align:top}th{background:#f7fafc}code{font-size:12px}
.d-merge,.d-replace,.d-relocate,.d-idempotent,.d-noop{color:#22543d}.d-fail_closed{color:#9b2c2c}
.j-abandoned{color:#9b2c2c;font-weight:600}.j-live{color:#22543d;font-weight:600}.muted{color:#718096}
.reason{color:#4a5568;font-size:12px}.message{color:#4a5568;font-size:12px;max-width:40em}
.run{margin-top:4px;font-size:12px}.run-task{margin-left:8px}
"""


def render_page(
    rows: list[PublicationRow],
    ui_base: str,
    total: int,
    offset: int,
    limit: int,
    result: PageResult,
    params: dict[str, str],
    next_offset: int | None = None,
) -> str:
    """The HTML page of a page of rows.

    :param rows: the rows.
    :param ui_base: the lakeFS UI base URL.
    :param total: task instances in all.
    :param offset: the first task instance shown.
    :param limit: task instances per page.
    :param result: what reading cost.
    :param params: the request's query (for the paging links).
    :param next_offset: where the next page starts (a page filtered by decision may have read further).
    """
    body = []
    for row in rows:
        found = links(ui_base, row)
        replaced = ""
        if row.replaced:
            what = "the abandoned publication of try" if row.replaced.get("abandoned") else "try"
            number = row.replaced.get("try_number")
            replaced = (f"replaced {what} {_e(number)}: " if number else "replaced an abandoned publication: ") + (
                _code_link(found.get("replaced"), row.replaced.get("output_ref"))
            )
        elif row.decision == "replace":
            replaced = "replaced an abandoned publication"
        if row.superseded_by:
            replaced += f"{'<br>' if replaced else ''}superseded by try {row.superseded_by}"
        if row.found_by:
            replaced += f"{'<br>' if replaced else ''}<span class='muted'>left on the target, found by the " + (
                "replacing try's record</span>" if row.found_by == "replacing try" else "sensor's probe</span>"
            )
        run = ""
        if row.run_branch:
            run = (
                f"<div class='run'>run branch <a href='{_e(found['run_branch'])}' target='_blank' rel='noopener'>"
                f"{_e(row.run_branch)}</a>"
                + "".join(
                    f"<div class='run-task' data-task='{_e(t.task_id)}' data-try='{_e(t.try_number)}'>"
                    f"{_e(t.task_id)}{'' if t.map_index < 0 else f' [{t.map_index}]'} try {_e(t.try_number)}: "
                    + " ".join(_code_link(found.get(f"run_task:{c}"), c) for c in t.commits)
                    + "</div>"
                    for t in row.run_tasks
                )
                + (" <span class='muted'>(newest shown)</span>" if row.run_tasks_truncated else "")
                + "</div>"
            )
        evidence = "<br>".join(
            (
                f"<a href='{_e(found[f'evidence:{e.branch}'])}' target='_blank' rel='noopener'>{_e(e.branch)}</a>"
                if e.kept
                else f"<span class='muted'>{_e(e.branch)} (deleted)</span>"
            )
            + f" <b>{_e(e.error)}</b>"
            + (f"<div class='message'>{_e(e.message)}</div>" if e.message else "")
            for e in row.evidence
        )
        scope = ", ".join(row.output_prefixes) or "whole branch"
        if row.input_prefixes:
            scope += f"<br><span class='muted'>reads {_e(', '.join(row.input_prefixes))}</span>"
        compare = (
            f" <a href='{_e(found['compare'])}' target='_blank' rel='noopener'>diff</a>" if "compare" in found else ""
        )
        judgement = (
            f"<span class='j-{_e(row.judgement_label).replace(' ', '-')}' title='{_e(row.judgement_reason)}'>"
            f"{_e(row.judgement_label)}</span>"
            if row.judgement_label
            else ""
        )
        body.append(
            f"<tr class='publication' data-decision='{_e(row.decision)}' data-try='{row.try_number}' "
            f"data-run='{_e(row.run_id)}' data-task='{_e(row.task_id)}' data-output='{_e(row.output_ref)}'>"
            f"<td>{_e(row.dag_id)}</td><td>{_e(row.run_id)}</td><td>{_e(row.task_id)}"
            f"{'' if row.map_index < 0 else f' [{row.map_index}]'}</td><td>{row.try_number}</td>"
            f"<td><span class='decision d-{_e(row.decision)}'>{_e(row.decision.replace('_', ' '))}</span>"
            f"<div class='reason'>{_e(row.reason)}</div>{run}</td>"
            f"<td>{_e(row.repository)}@{_e(row.target_branch)}</td>"
            f"<td>{_code_link(found.get('input_commit'), row.input_commit)}"
            f"{f'<br><span class=muted>{_e(row.input_ref)}</span>' if row.input_ref else ''}</td>"
            f"<td>{_code_link(found.get('staged_commit'), row.staged_commit)}</td>"
            f"<td class='published'>{_code_link(found.get('output_ref'), row.output_ref)}{compare}</td>"
            f"<td>{replaced}</td><td>{judgement}</td><td>{scope}</td><td class='evidence'>{evidence}</td></tr>"
        )
    pages = []
    if offset > 0:
        query = urllib.parse.urlencode({**params, "offset": max(0, offset - limit)})
        pages.append(f"<a href='?{_e(query)}'>newer</a>")
    following = next_offset if next_offset is not None else (offset + limit if offset + limit < total else None)
    if following is not None:
        query = urllib.parse.urlencode({**params, "offset": following})
        pages.append(f"<a href='?{_e(query)}'>older</a>")
    errors = "".join(f"<p class='j-abandoned'>{_e(k)}: {_e(v)}</p>" for k, v in result.errors.items())
    legend = "".join(f"<li><b>{_e(k.replace('_', ' '))}</b>: {_e(v)}</li>" for k, v in DECISION_REASONS.items())
    header = "".join(
        f"<th>{h}</th>"
        for h in (
            "DAG",
            "Run",
            "Task",
            "Try",
            "Decision",
            "Target",
            "Input",
            "Staged",
            "Published",
            "Replaced / superseded",
            "Now",
            "Scope",
            "Evidence kept",
        )
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>lakeFS publications</title>"
        f"<style>{_STYLE}</style></head><body><h2>lakeFS publications</h2>"
        f"<p class='muted'>Task instances {offset + 1 if total else 0}-{min(offset + limit, total)} of {total}, "
        f"newest run first; read from lakeFS in {result.calls} calls. {' · '.join(pages)}</p>{errors}"
        f"<table id='publications'><thead><tr>{header}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        f"<details><summary>Decisions</summary><ul>{legend}</ul></details></body></html>"
    )
