"""What every server of the "lakeFS publications" view shares, with no web framework: reading a page
(Airflow's database, then lakeFS through the bounded reader), its JSON answer, its links into lakeFS's
UI and its HTML.

Airflow 3 serves it from a FastAPI app (:mod:`~airflow_lakefence.ui.app`), Airflow 2.11 from a
Flask AppBuilder view (:mod:`~airflow_lakefence.ui.fab`); each checks the user with its own auth
manager and passes the DAGs the user may read. The lakeFS connection is
``[lakefence] publications_conn_id`` (default ``lakefs_default``); its credentials stay in the server.
"""

from __future__ import annotations

import html
import urllib.parse
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from airflow_lakefence.core.publication.history import DECISION_REASONS, PublicationRow
from airflow_lakefence.ui.reader import CACHE_SECONDS, HistoryReader, PageResult
from airflow_lakefence.ui.source import PageQuery, task_instance_page

#: The most task instances one page shows.
MAX_LIMIT = 100
#: The most pages of task instances a page filtered by ``decision`` reads (the decision is in lakeFS).
DECISION_SCAN_PAGES = 5


def conf_value(name: str, fallback: str) -> str:
    """An option of the ``[lakefence]`` section of Airflow's configuration.

    :param name: the option.
    :param fallback: its value when unset.
    """
    from airflow.configuration import conf

    return str(conf.get("lakefence", name, fallback=fallback))


@lru_cache(maxsize=4)
def _reader(conn_id: str) -> tuple[HistoryReader, str]:
    from airflow_lakefence.hooks.lakefs import LakeFSHook

    hook = LakeFSHook(lakefs_conn_id=conn_id)
    return HistoryReader(hook.client), str(hook.settings["ui_base_url"])


def reader() -> tuple[HistoryReader, str]:
    """The history reader of the configured connection, and the lakeFS UI base URL."""
    return _reader(conf_value("publications_conn_id", "lakefs_default"))


def filled(value: str | None) -> str | None:
    """A query value, ``None`` for an empty one or a placeholder the UI left unfilled (``{MAP_INDEX}``
    on an unmapped task instance's page).

    :param value: the value as the request carried it.
    """
    if not value or (value.startswith("{") and value.endswith("}")):
        return None
    return value


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


def read_page(dag_ids: tuple[str, ...], query: dict[str, Any]) -> Page:
    """One page of rows, the ``decision`` filter applied before the page is cut.

    ``repository`` and ``branch`` select task instances in Airflow's database by where each one
    published (its own rendered fields). ``decision`` lives in lakeFS: a filtered page reads up to
    :data:`DECISION_SCAN_PAGES` pages of task instances, keeps those with a row of that decision until
    ``limit`` are found, and says where to go on (``next_offset``).

    :param dag_ids: the DAGs the user may read (the caller checked them with its auth manager).
    :param query: ``task_id``, ``run_id``, ``map_index`` (an int or ``None``), ``repository``,
        ``branch``, ``decision``, ``offset`` and ``limit``; absent keys mean no filter.
    """
    from airflow.utils.session import create_session

    history, ui_base = reader()
    staging_prefix = conf_value("publications_staging_prefix", "lakefence")
    decision = filled(query.get("decision"))
    limit = int(query.get("limit", 20))
    rows: list[PublicationRow] = []
    results: list[PageResult] = []
    offset, found, scanned, total = int(query.get("offset", 0)), 0, 0, 0
    next_offset: int | None = None
    for _round in range(DECISION_SCAN_PAGES if decision else 1):
        page = PageQuery(
            dag_ids,
            filled(query.get("task_id")),
            filled(query.get("run_id")),
            query.get("map_index"),
            filled(query.get("repository")),
            filled(query.get("branch")),
            offset,
            limit,
        )
        with create_session() as session:
            facts, total = task_instance_page(session, page, staging_prefix)
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
            if decision and found == limit:
                next_offset = offset + index + 1 if offset + index + 1 < total else None
                break
        if not decision or found == limit or next_offset is None:
            break
        offset = next_offset
    merged = PageResult(
        [r for res in results for r in res.rows],
        sum(r.calls for r in results),
        {k: v for r in results for k, v in r.errors.items()},
        sum(r.bound for r in results),
    )
    return Page(rows, merged, total, ui_base, next_offset, scanned)


def page_json(page: Page, offset: int, limit: int) -> dict[str, Any]:
    """The JSON answer of a page: its rows with their links, and what reading it cost.

    :param page: the page read (:func:`read_page`).
    :param offset: the first task instance of the page.
    :param limit: task instances per page.
    """
    return {
        "rows": [{**r.to_dict(), "links": links(page.ui_base, r)} for r in page.rows],
        "total_task_instances": page.total,
        "offset": offset,
        "limit": limit,
        "next_offset": page.next_offset,
        "scanned_task_instances": page.scanned,
        "lakefs_calls": page.result.calls,
        "lakefs_calls_bound": page.result.bound,
        "cache_seconds": CACHE_SECONDS,
        "errors": page.result.errors,
    }


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


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _code_link(url: str | None, text: str | None) -> str:
    if not text:
        return ""
    short = _e(text[:12])
    if not url:
        return f"<code title='{_e(text)}'>{short}</code>"
    return f"<a href='{_e(url)}' target='_blank' rel='noopener' title='{_e(text)}'><code>{short}</code></a>"


# Scoped to the view's own block: Airflow 2 shows it inside its page, whose styles it must not change.
_STYLE = """
.lakefence{font-family:system-ui,sans-serif;font-size:13px;color:#1a202c}
.lakefence table{border-collapse:collapse;width:100%}.lakefence th,.lakefence td{border-bottom:1px solid #e2e8f0;
padding:4px 6px;text-align:left;vertical-align:top}.lakefence th{background:#f7fafc}.lakefence code{font-size:12px}
.d-merge,.d-replace,.d-relocate,.d-idempotent,.d-noop{color:#22543d}.d-fail_closed{color:#9b2c2c}
.j-abandoned{color:#9b2c2c;font-weight:600}.j-live{color:#22543d;font-weight:600}.muted{color:#718096}
.reason{color:#4a5568;font-size:12px}.message{color:#4a5568;font-size:12px;max-width:40em}
.run{margin-top:4px;font-size:12px}.run-task{margin-left:8px}
"""

_HEADER = (
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


def _row_html(ui_base: str, row: PublicationRow) -> str:
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
    compare = f" <a href='{_e(found['compare'])}' target='_blank' rel='noopener'>diff</a>" if "compare" in found else ""
    judgement = (
        f"<span class='j-{_e(row.judgement_label).replace(' ', '-')}' title='{_e(row.judgement_reason)}'>"
        f"{_e(row.judgement_label)}</span>"
        if row.judgement_label
        else ""
    )
    return (
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


def render_body(page: Page, offset: int, limit: int, params: dict[str, str]) -> str:
    """The view's block (heading, table, paging, legend), for a page of its own or inside Airflow 2's.

    :param page: the page read (:func:`read_page`).
    :param offset: the first task instance shown.
    :param limit: task instances per page.
    :param params: the request's query but ``offset`` (for the paging links).
    """
    rows, ui_base, total, result, next_offset = page.rows, page.ui_base, page.total, page.result, page.next_offset
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
    header = "".join(f"<th>{h}</th>" for h in _HEADER)
    body = "".join(_row_html(ui_base, row) for row in rows)
    return (
        f"<style>{_STYLE}</style><div class='lakefence'><h2>lakeFS publications</h2>"
        f"<p class='muted'>Task instances {offset + 1 if total else 0}-{min(offset + limit, total)} of {total}, "
        f"newest run first; read from lakeFS in {result.calls} calls. {' · '.join(pages)}</p>{errors}"
        f"<table id='publications'><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>"
        f"<details><summary>Decisions</summary><ul>{legend}</ul></details></div>"
    )


def render_page(page: Page, offset: int, limit: int, params: dict[str, str]) -> str:
    """The view as an HTML page of its own (what Airflow 3's UI shows in a frame); see :func:`render_body`.

    :param page: the page read (:func:`read_page`).
    :param offset: the first task instance shown.
    :param limit: task instances per page.
    :param params: the request's query but ``offset`` (for the paging links).
    """
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>lakeFS publications</title>"
        "<style>body{margin:12px}</style></head><body>"
        f"{render_body(page, offset, limit, params)}</body></html>"
    )
