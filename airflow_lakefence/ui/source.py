"""The task instances of a page of publication history, from Airflow's metadata database.

The API server serving the view reads its own database (it holds no lakeFS state): which tasks of a
DAG are fenced publishers (their rendered fields name a ``repository`` and a ``target_branch``),
their task instances newest run first, where each published (its rendered fields), and the XComs the
abandoned-publication judgement needs (``output_ref``, ``supersedes``). Four queries per page.

A task instance whose rendered fields Airflow pruned (it keeps the last
``max_num_rendered_ti_fields_per_task`` per task) takes its repository and branch from its task's
newest rendered fields: a DAG's publisher rarely changes where it publishes.
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


def publisher_tasks(session: Any, dag_ids: Sequence[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """The fenced publisher tasks of ``dag_ids`` and their newest rendered fields: ``{(dag, task): fields}``.

    :param session: an SQLAlchemy session on Airflow's database.
    :param dag_ids: the DAGs.
    """
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
    from sqlalchemy import select

    newest: dict[tuple[str, str], dict[str, Any]] = {}
    if not dag_ids:
        return newest
    # Newest first per task: the first seen wins (a handful of rows per task, Airflow prunes the rest).
    rows = session.execute(
        select(RTIF.dag_id, RTIF.task_id, RTIF.rendered_fields).where(RTIF.dag_id.in_(list(dag_ids)))
    ).all()
    for dag_id, task_id, fields in reversed(rows):
        if isinstance(fields, dict) and all(isinstance(fields.get(f), str) for f in PUBLISHER_FIELDS):
            newest.setdefault((dag_id, task_id), fields)
    return newest


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
    from sqlalchemy import func, select, tuple_

    tasks = publisher_tasks(session, query.dag_ids)
    if query.task_id is not None:
        tasks = {k: v for k, v in tasks.items() if k[1] == query.task_id}
    if query.repository is not None or query.branch is not None:
        tasks = {
            k: v
            for k, v in tasks.items()
            if query.repository in (None, v.get("repository")) and query.branch in (None, v.get("target_branch"))
        }
    if not tasks:
        return [], 0
    where: list[Any] = [tuple_(TI.dag_id, TI.task_id).in_(list(tasks))]
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
    idents = [(ti.dag_id, ti.run_id, ti.task_id, ti.map_index) for ti in tis]
    rendered = {}
    if idents:
        for dag_id, run_id, task_id, map_index, fields in session.execute(
            select(RTIF.dag_id, RTIF.run_id, RTIF.task_id, RTIF.map_index, RTIF.rendered_fields).where(
                tuple_(RTIF.dag_id, RTIF.run_id, RTIF.task_id, RTIF.map_index).in_(idents)
            )
        ).all():
            rendered[(dag_id, run_id, task_id, map_index)] = fields or {}
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
