"""The task instances of a page of publication history, from Airflow's metadata database.

The API server serving the view reads its own database (it holds no lakeFS state): which tasks of a
DAG are fenced publishers (their rendered fields name a ``repository`` and a ``target_branch``),
their task instances newest run first, where each published (its rendered fields), and the XComs the
abandoned-publication judgement needs (``output_ref``, ``supersedes``). Four queries per page.

The ``repository`` and ``branch`` filters select task instances by where each one published: its own
rendered fields, read with the publisher tasks' (the query that finds them), before the page is cut.
A task instance whose rendered fields Airflow pruned (it keeps the last
``max_num_rendered_ti_fields_per_task`` per task) takes its repository and branch from its task's
newest rendered fields, for the filters too: a DAG's publisher rarely changes where it publishes.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_lakefence.core.names.keys import PublicationKey
from airflow_lakefence.core.publication.history import TaskInstanceFacts

#: The rendered fields that make a task a fenced publisher.
PUBLISHER_FIELDS = ("repository", "target_branch")


@dataclass(frozen=True)
class PageQuery:
    """Which task instances a page shows.

    :param dag_ids: the DAGs (the caller has already kept only those the user may read).
    :param task_id: one task, or ``None`` for every fenced task of the DAGs.
    :param run_id: one run, or ``None`` for every run.
    :param map_index: one map index, or ``None`` for all.
    :param repository: only task instances publishing into this repository.
    :param branch: only task instances publishing onto this branch.
    :param offset: task instances to skip (newest first).
    :param limit: task instances on the page.
    """

    dag_ids: tuple[str, ...]
    task_id: str | None = None
    run_id: str | None = None
    map_index: int | None = None
    repository: str | None = None
    branch: str | None = None
    offset: int = 0
    limit: int = 20


def _as_prefixes(value: Any) -> tuple[str, ...]:
    """A rendered list field as Airflow stored it (a list, or its ``str()`` for some versions)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                return ()
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return ()


def _xcom_model() -> Any:
    """The XCom table's model: ``XComModel`` on Airflow 3, the configured ``XCom`` class on Airflow 2
    (same table and columns; its ``deserialize_value`` is the backend's)."""
    from airflow.models import xcom

    return getattr(xcom, "XComModel", None) or xcom.XCom


def _run_order(dag_run: Any) -> Any:
    """The column runs are ordered by, newest first: ``run_after`` on Airflow 3, the logical date
    (``execution_date``) on Airflow 2, which has no ``run_after``.

    :param dag_run: the ``DagRun`` model.
    """
    return dag_run.run_after if hasattr(dag_run, "run_after") else dag_run.execution_date


def _xcom_values(session: Any, tis: Sequence[Any], keys: Iterable[str]) -> dict[tuple[str, str, str, int, str], Any]:
    from sqlalchemy import select, tuple_

    XComModel = _xcom_model()

    if not tis:
        return {}
    idents = [(ti.dag_id, ti.run_id, ti.task_id, ti.map_index) for ti in tis]
    rows = session.execute(
        select(
            XComModel.dag_id, XComModel.run_id, XComModel.task_id, XComModel.map_index, XComModel.key, XComModel.value
        )
        .where(tuple_(XComModel.dag_id, XComModel.run_id, XComModel.task_id, XComModel.map_index).in_(idents))
        .where(XComModel.key.in_(list(keys)))
    ).all()
    found = {}
    for dag_id, run_id, task_id, map_index, key, value in rows:
        try:
            found[(dag_id, run_id, task_id, map_index, key)] = XComModel.deserialize_value(_Row(value))
        except Exception:  # a value this reader cannot decode is shown as absent
            continue
    return found


class _Row:
    """What ``XComModel.deserialize_value`` reads (``.value``)."""

    def __init__(self, value: Any) -> None:
        self.value = value


_Ident = tuple[str, str, str, int]


def _rendered(session: Any, dag_ids: Sequence[str]) -> list[tuple[_Ident, Any]]:
    """Every rendered-fields row of ``dag_ids`` (Airflow keeps a few per task): ``(ti ident, fields)``."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
    from sqlalchemy import select

    if not dag_ids:
        return []
    rows = session.execute(
        select(RTIF.dag_id, RTIF.run_id, RTIF.task_id, RTIF.map_index, RTIF.rendered_fields).where(
            RTIF.dag_id.in_(list(dag_ids))
        )
    ).all()
    return [((dag_id, run_id, task_id, map_index), fields) for dag_id, run_id, task_id, map_index, fields in rows]


def _newest(rendered: Sequence[tuple[_Ident, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    newest: dict[tuple[str, str], dict[str, Any]] = {}
    # Newest first per task: the first seen wins (a handful of rows per task, Airflow prunes the rest).
    for (dag_id, _run_id, task_id, _map_index), fields in reversed(rendered):
        if isinstance(fields, dict) and all(isinstance(fields.get(f), str) for f in PUBLISHER_FIELDS):
            newest.setdefault((dag_id, task_id), fields)
    return newest


def publisher_tasks(session: Any, dag_ids: Sequence[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """The fenced publisher tasks of ``dag_ids`` and their newest rendered fields: ``{(dag, task): fields}``.

    :param session: an SQLAlchemy session on Airflow's database.
    :param dag_ids: the DAGs.
    """
    return _newest(_rendered(session, dag_ids))


def _published_where(query: PageQuery, fields: Any) -> bool:
    """Whether rendered fields publish where the query's ``repository`` and ``branch`` ask."""
    if not isinstance(fields, dict):
        return False
    return query.repository in (None, fields.get("repository")) and query.branch in (None, fields.get("target_branch"))


def task_instance_page(
    session: Any, query: PageQuery, staging_prefix: str = "lakefence"
) -> tuple[list[TaskInstanceFacts], int]:
    """The task instances of one page, newest run first, and how many there are in all.

    :param session: an SQLAlchemy session on Airflow's database.
    :param query: the page.
    :param staging_prefix: the staging branch prefix the publishers use.
    """
    from airflow.models.dagrun import DagRun
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
    from airflow.models.taskinstance import TaskInstance as TI
    from sqlalchemy import exists, false, func, not_, or_, select, tuple_

    rendered_rows = _rendered(session, query.dag_ids)
    tasks = _newest(rendered_rows)
    if query.task_id is not None:
        tasks = {k: v for k, v in tasks.items() if k[1] == query.task_id}
    if not tasks:
        return [], 0
    where: list[Any] = [tuple_(TI.dag_id, TI.task_id).in_(list(tasks))]
    if query.repository is not None or query.branch is not None:
        # Each task instance by its own rendered fields; one whose fields Airflow pruned by its task's newest.
        columns = tuple_(TI.dag_id, TI.run_id, TI.task_id, TI.map_index)
        matching = [i for i, fields in rendered_rows if (i[0], i[2]) in tasks and _published_where(query, fields)]
        fallback = [k for k, v in tasks.items() if _published_where(query, v)]
        pruned: Any = false()
        if fallback:
            kept = (
                (RTIF.dag_id == TI.dag_id)
                & (RTIF.run_id == TI.run_id)
                & (RTIF.task_id == TI.task_id)
                & (RTIF.map_index == TI.map_index)
            )
            pruned = tuple_(TI.dag_id, TI.task_id).in_(fallback) & not_(exists().where(kept))
        where.append(or_(columns.in_(matching) if matching else false(), pruned))
    if query.run_id is not None:
        where.append(TI.run_id == query.run_id)
    if query.map_index is not None:
        where.append(TI.map_index == query.map_index)
    total = session.scalar(select(func.count()).select_from(TI).where(*where)) or 0
    tis = (
        session.execute(
            select(TI)
            .join(DagRun, (DagRun.dag_id == TI.dag_id) & (DagRun.run_id == TI.run_id))
            .where(*where)
            .order_by(_run_order(DagRun).desc(), TI.dag_id, TI.task_id, TI.map_index)
            .offset(query.offset)
            .limit(query.limit)
        )
        .scalars()
        .all()
    )
    recorded = dict(rendered_rows)  # the page's own rendered fields: no second query
    rendered = {
        ident: recorded.get(ident) or {} for ident in ((ti.dag_id, ti.run_id, ti.task_id, ti.map_index) for ti in tis)
    }
    xcoms = _xcom_values(session, tis, ("output_ref", "supersedes"))
    facts = []
    for ti in tis:
        ident = (ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
        fields = rendered.get(ident) or tasks[(ti.dag_id, ti.task_id)]
        supersedes = xcoms.get((*ident, "supersedes"))
        output_ref = xcoms.get((*ident, "output_ref"))
        facts.append(
            TaskInstanceFacts(
                key=PublicationKey(ti.dag_id, ti.run_id, ti.task_id, ti.map_index),
                try_number=int(ti.try_number or 0),
                state=str(getattr(ti.state, "value", ti.state)) if ti.state is not None else "none",
                repository=str(fields.get("repository")),
                target_branch=str(fields.get("target_branch")),
                output_ref=output_ref if isinstance(output_ref, str) else None,
                supersedes=supersedes if isinstance(supersedes, dict) else None,
                output_prefixes=_as_prefixes(fields.get("output_prefixes")),
                input_prefixes=_as_prefixes(fields.get("input_prefixes")),
                staging_prefix=staging_prefix,
            )
        )
    return facts, int(total)
