"""Read one page of the publication history from lakeFS, in a bounded number of calls.

A page is a list of task instances (:class:`~airflow_lakefence.core.publication.history.TaskInstanceFacts`,
from Airflow's database). For each of them the reader makes, whatever the history depth:

* one listing of its run's records on the run-state branch (:func:`read_run_state`);
* one listing of its key's staging branches, only when its rows need it
  (:func:`needs_staging_branches`: it recorded evidence, or it is running);

and then one ``get_commit`` per distinct commit a try of the page reported (its output: the staged
commit and the input its ``lakefence.*`` metadata names). So a page of ``P`` task instances with ``R``
reported publications costs at most ``2·P + R`` lakeFS calls (:func:`calls_bound`), made a few at a
time; older runs are other pages. A task instance that never ran costs nothing.

Answers are kept for :data:`CACHE_SECONDS` (an operator clicking around does not cost lakeFS
anything twice); lakeFS credentials stay in the API server: the browser gets rows and URLs only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from airflow_lakefence.core.names.staging_names import staging_branch_prefix
from airflow_lakefence.core.ports import CommitInfo
from airflow_lakefence.core.publication.abandonment import LIVE_STATES
from airflow_lakefence.core.publication.history import (
    PublicationRow,
    TaskInstanceFacts,
    commits_to_read,
    history_rows,
)
from airflow_lakefence.core.records.run_state import EVIDENCE_KEY
from airflow_lakefence.exceptions import LakeFenceError, LakeFSNotFoundError
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from airflow_lakefence.lakefs_adapter.run_state_store import read_run_state

#: How long a page's answer is reused (seconds).
CACHE_SECONDS = 15.0
#: lakeFS calls of one page made at once.
PARALLEL_CALLS = 4


def calls_bound(task_instances: int, publications: int) -> int:
    """The most lakeFS calls a page makes (the cost contract of the view).

    :param task_instances: task instances on the page that ran.
    :param publications: distinct commits their tries reported.
    """
    return 2 * task_instances + publications


@dataclass
class PageResult:
    """One page's rows and what reading it cost.

    :param rows: the rows, in the page's task-instance order, newest try first within each.
    :param calls: lakeFS calls made.
    :param errors: ``{task instance: message}`` for task instances whose history could not be read.
    """

    rows: list[PublicationRow]
    calls: int
    errors: dict[str, str] = field(default_factory=dict)


@dataclass
class _TiRead:
    records: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def needs_staging_branches(ti: TaskInstanceFacts, records: Mapping[str, Any]) -> bool:
    """Whether a task instance's rows need its key's staging branches: to tell which evidence branch
    is still kept (it recorded evidence), or the newest try's branch (the sensor's judgement of a
    running task instance).

    :param ti: the task instance.
    :param records: its run's records.
    """
    return ti.state in LIVE_STATES or any(key.startswith(EVIDENCE_KEY + "/") for key in records)


class HistoryReader:
    """Reads pages of history through one lakeFS client, caching answers briefly.

    :param client: the lakeFS client (its credentials never leave this process).
    :param clock: the clock of the cache.
    """

    def __init__(self, client: LakeFSClient, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self._cache: dict[tuple[Any, ...], tuple[float, PageResult]] = {}
        self._lock = threading.Lock()

    def read(self, page: Sequence[TaskInstanceFacts]) -> PageResult:
        """The rows of ``page`` (cached for :data:`CACHE_SECONDS`).

        :param page: the task instances of the page.
        """
        cache_key = tuple(repr(ti) for ti in page)
        now = self.clock()
        with self._lock:
            hit = self._cache.get(cache_key)
            if hit is not None and now - hit[0] < CACHE_SECONDS:
                return hit[1]
        result = self._read(page)
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if now - v[0] < CACHE_SECONDS}
            self._cache[cache_key] = (now, result)
        return result

    def _read(self, page: Sequence[TaskInstanceFacts]) -> PageResult:
        ran = [ti for ti in page if ti.try_number >= 1]
        with ThreadPoolExecutor(PARALLEL_CALLS) as pool:
            reads = list(pool.map(self._records, ran))
            listed = [ti for ti, r in zip(ran, reads, strict=True) if needs_staging_branches(ti, r.records)]
            wanted = sorted(
                {(ti.repository, ref) for ti, r in zip(ran, reads, strict=True) for ref in commits_to_read(r.records)}
            )
            # The second round at once: the listings some task instances need, and the commits.
            listings = pool.map(self._branches, listed)
            found = list(pool.map(lambda w: self._commit(*w), wanted))
            branches = dict(zip((id(ti) for ti in listed), listings, strict=True))
        calls = len(ran) + len(listed) + len(wanted)
        commits = {ref: commit for (_, ref), commit in zip(wanted, found, strict=True) if commit is not None}
        rows: list[PublicationRow] = []
        errors = {}
        for ti, read in zip(ran, reads, strict=True):
            names, error = branches.get(id(ti), ([], None))
            message = "; ".join(m for m in (read.error, error) if m)
            if message:
                errors[f"{ti.key.dag_id}.{ti.key.task_id}[{ti.key.run_id}, {ti.key.map_index}]"] = message
            rows.extend(history_rows(ti, read.records, commits, names))
        return PageResult(rows, calls, errors)

    def _records(self, ti: TaskInstanceFacts) -> _TiRead:
        read = _TiRead()
        try:
            read.records = read_run_state(self.client, ti.repository, ti.key)
        except LakeFenceError as exc:
            read.error = f"run state: {exc}"
        return read

    def _branches(self, ti: TaskInstanceFacts) -> tuple[list[tuple[str, str]], str | None]:
        try:
            prefix = staging_branch_prefix(ti.key, ti.staging_prefix)
            return self.client.list_branches(ti.repository, prefix, show_hidden=True), None
        except LakeFenceError as exc:
            return [], f"staging branches: {exc}"

    def _commit(self, repository: str, ref: str) -> CommitInfo | None:
        try:
            return self.client.get_commit(repository, ref)
        except LakeFSNotFoundError:
            return None  # garbage-collected: the row shows the id without its details
        except LakeFenceError:
            return None
