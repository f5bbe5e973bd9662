"""Read one page of the publication history from lakeFS, in a bounded number of calls.

A page is a list of task instances (:class:`~airflow_lakefence.core.publication.history.TaskInstanceFacts`,
from Airflow's database). For each of them the reader makes, whatever the history depth:

* one listing of its run's records on the run-state branch (:func:`read_run_state`);
* one listing of its key's staging branches, only when its rows need it
  (:func:`needs_staging_branches`: it recorded evidence, or it is running);

then, in one round, one ``get_commit`` per distinct commit the page's records name (each try's
reported output, and the commit a replacement took off the target), and one probe of the abandoned
sensor (:func:`~airflow_lakefence.triggers.probes.probe_abandoned`, the sensor's own poke) per
distinct target of the task instances whose newest tries reported nothing
(:func:`~airflow_lakefence.core.publication.history.needs_probe`: it names the publication a try
that died before reporting left there); and for each run-branch publication on the page, one
``get_commit`` of its staged commit (which names the run branch's HEAD it published) unless its
output is that commit, and one ``log`` of the run branch from that HEAD down to the run's input
(at most :data:`~airflow_lakefence.core.publication.history.RUN_LOG_AMOUNT` commits).

So a page of ``P`` task instances, ``R`` distinct commits named by their records, ``T`` probed
targets and ``B`` run-branch publications costs at most ``2·P + R + 4·T + 2·B`` lakeFS calls
(:func:`calls_bound`; a probe is one call, four at most for a scoped write set whose newest commit
is a race loser's revert, with a running publisher): older runs are other pages. A task instance
that never ran costs nothing. Every call goes through one counter (:attr:`PageResult.calls`).

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

from airflow_lakefence.core.names.keys import PublicationKey
from airflow_lakefence.core.names.staging_names import staging_branch_prefix
from airflow_lakefence.core.ports import CommitInfo
from airflow_lakefence.core.publication.abandonment import LIVE_STATES, Judgement, PublisherScope
from airflow_lakefence.core.publication.history import (
    RUN_LOG_AMOUNT,
    PublicationRow,
    TaskInstanceFacts,
    commits_to_read,
    history_rows,
    needs_probe,
    reported_records,
    run_publication_of,
)
from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.core.records.run_state import EVIDENCE_KEY
from airflow_lakefence.exceptions import LakeFenceError, LakeFSNotFoundError
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from airflow_lakefence.lakefs_adapter.run_state_store import read_run_state

#: How long a page's answer is reused (seconds).
CACHE_SECONDS = 15.0
#: lakeFS calls of one page made at once.
PARALLEL_CALLS = 4
#: The most lakeFS calls of one probe of the abandoned sensor (a scoped write set: two ``log``
#: calls, the ``output_ref``'s commit, the staging listing of a running publisher).
PROBE_CALLS = 4


def calls_bound(task_instances: int, publications: int, probes: int = 0, run_publications: int = 0) -> int:
    """The most lakeFS calls a page makes (the cost contract of the view).

    :param task_instances: task instances on the page that ran.
    :param publications: distinct commits their records name (reported outputs, replaced commits).
    :param probes: distinct targets probed with the abandoned sensor's poke.
    :param run_publications: run-branch publications on the page.
    """
    return 2 * task_instances + publications + PROBE_CALLS * probes + 2 * run_publications


@dataclass
class PageResult:
    """One page's rows and what reading it cost.

    :param rows: the rows, in the page's task-instance order, newest try first within each.
    :param calls: lakeFS calls made.
    :param errors: ``{task instance: message}`` for task instances whose history could not be read.
    :param bound: the most calls the page could have made (:func:`calls_bound` of what it held).
    """

    rows: list[PublicationRow]
    calls: int
    errors: dict[str, str] = field(default_factory=dict)
    bound: int = 0


@dataclass
class _TiRead:
    records: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


class _Counting:
    """The client, counting the calls made through it (the probes' too)."""

    def __init__(self, client: LakeFSClient) -> None:
        self._client = client
        self._lock = threading.Lock()
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls += 1
            return method(*args, **kwargs)

        return counted


class _PageView:
    """What the sensor's probe asks Airflow, answered from the page's task instances (Airflow's
    database was read once for the page)."""

    def __init__(self, page: Sequence[TaskInstanceFacts]) -> None:
        self._facts = {ti.key: ti for ti in page}

    def task_states(self, dag_id: str, task_ids: list[str], run_ids: list[str] | None = None) -> Any:
        answer: dict[str, dict[str, str]] = {}
        for key, ti in self._facts.items():
            if key.dag_id == dag_id and key.task_id in task_ids and (run_ids is None or key.run_id in run_ids):
                name = key.task_id if key.map_index < 0 else f"{key.task_id}_{key.map_index}"
                answer.setdefault(key.run_id, {})[name] = ti.state
        return answer

    def output_ref(self, key: PublicationKey) -> Any:
        ti = self._facts.get(key)
        return None if ti is None else ti.output_ref

    def supersedes(self, key: PublicationKey) -> Any:
        ti = self._facts.get(key)
        return None if ti is None else ti.supersedes

    def evidence(self, key: PublicationKey) -> Any:
        return None


_Target = tuple[str, str, tuple[str, ...], str, str, str]


def _probe_target(ti: TaskInstanceFacts) -> _Target:
    """What one probe judges: the task's target (its write set when it declares one) for its task."""
    return (ti.repository, ti.target_branch, ti.output_prefixes, ti.key.dag_id, ti.key.task_id, ti.staging_prefix)


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
        client = _Counting(self.client)
        ran = [ti for ti in page if ti.try_number >= 1]
        with ThreadPoolExecutor(PARALLEL_CALLS) as pool:
            reads = list(pool.map(lambda ti: self._records(client, ti), ran))
            listed = [ti for ti, r in zip(ran, reads, strict=True) if needs_staging_branches(ti, r.records)]
            wanted = sorted(
                {(ti.repository, ref) for ti, r in zip(ran, reads, strict=True) for ref in commits_to_read(r.records)}
            )
            targets = sorted(
                {_probe_target(ti) for ti, r in zip(ran, reads, strict=True) if needs_probe(ti, r.records)}
            )
            # The second round at once: the listings some task instances need, the commits, the probes.
            view = _PageView(page)
            listings = pool.map(lambda ti: self._branches(client, ti), listed)
            found = pool.map(lambda w: self._commit(client, *w), wanted)
            judged = pool.map(lambda t: self._probe(client, view, t), targets)
            branches = dict(zip((id(ti) for ti in listed), listings, strict=True))
            commits = {ref: commit for (_, ref), commit in zip(wanted, found, strict=True) if commit is not None}
            probes = dict(zip(targets, judged, strict=True))
            # Run-branch publications: the staged commit names the run's HEAD, whose log names the tasks.
            runs = self._run_publications(ran, reads, commits)
            staged = sorted({(repo, s) for repo, s, _, _, _ in runs if s is not None and s not in commits})
            for (_, ref), commit in zip(staged, pool.map(lambda w: self._commit(client, *w), staged), strict=True):
                if commit is not None:
                    commits[ref] = commit
            starts = [(repo, self._run_start(commits, s, branch), i, out) for repo, s, branch, i, out in runs]
            logs = pool.map(lambda r: self._log(client, r[0], r[1], r[2]), starts)
            run_logs = {out: log for (_, _, _, out), log in zip(starts, logs, strict=True)}
        rows: list[PublicationRow] = []
        errors = {}
        for ti, read in zip(ran, reads, strict=True):
            names, error = branches.get(id(ti), ([], None))
            probed = needs_probe(ti, read.records)
            judgement, probe_error = probes.get(_probe_target(ti), (None, None)) if probed else (None, None)
            message = "; ".join(m for m in (read.error, error, probe_error) if m)
            if message:
                errors[f"{ti.key.dag_id}.{ti.key.task_id}[{ti.key.run_id}, {ti.key.map_index}]"] = message
            rows.extend(history_rows(ti, read.records, commits, names, judgement, run_logs))
        bound = calls_bound(len(ran), len(wanted), len(targets), len(runs))
        return PageResult(rows, client.calls, errors, bound)

    @staticmethod
    def _run_publications(
        ran: Sequence[TaskInstanceFacts], reads: Sequence[_TiRead], commits: Mapping[str, CommitInfo]
    ) -> list[tuple[str, str | None, str, str | None, str]]:
        """``(repository, staged commit, run branch, input, output)`` of each run-branch publication reported."""
        runs: list[tuple[str, str | None, str, str | None, str]] = []
        for ti, read in zip(ran, reads, strict=True):
            for _number, value in sorted(reported_records(read.records).items()):
                output = commits.get(str(value.get("output_ref")))
                found = run_publication_of(output)
                record = None if output is None else decode_metadata(output.metadata)
                if found is None or record is None:
                    continue
                staged = record.staged_commit or output.id  # type: ignore[union-attr]
                runs.append((ti.repository, staged, found[0], record.input_ref, output.id))  # type: ignore[union-attr]
        return runs

    @staticmethod
    def _run_start(commits: Mapping[str, CommitInfo], staged: str | None, branch: str) -> str:
        """Where the run's log starts: the HEAD the staged commit names, else the run branch now."""
        found = run_publication_of(commits.get(staged or ""))
        return found[1] if found is not None and found[1] else branch

    @staticmethod
    def _log(client: Any, repository: str, start: str, input_commit: str | None) -> list[CommitInfo]:
        try:
            log: list[CommitInfo] = client.log_commits(repository, start, amount=RUN_LOG_AMOUNT, stop_at=input_commit)
        except LakeFenceError:
            return []  # the run branch was deleted (and no HEAD recorded): no task to list
        return log

    @staticmethod
    def _probe(client: Any, view: _PageView, target: _Target) -> tuple[Judgement | None, str | None]:
        # The sensor's own poke; imported here: the triggers package imports Airflow's trigger classes,
        # which a page without a probe (and the reader's importers) need not load.
        from airflow_lakefence.triggers.probes import probe_abandoned

        repository, branch, prefixes, dag_id, task_id, staging_prefix = target
        try:
            judgement = probe_abandoned(
                client,
                view,
                repository=repository,
                branch=branch,
                scope=PublisherScope(dag_id, task_id),
                staging_prefix=staging_prefix,
                output_prefixes=prefixes,
            )
        except LakeFenceError as exc:
            return None, f"target: {exc}"
        return judgement, None

    @staticmethod
    def _records(client: Any, ti: TaskInstanceFacts) -> _TiRead:
        read = _TiRead()
        try:
            read.records = read_run_state(client, ti.repository, ti.key)
        except LakeFenceError as exc:
            read.error = f"run state: {exc}"
        return read

    @staticmethod
    def _branches(client: Any, ti: TaskInstanceFacts) -> tuple[list[tuple[str, str]], str | None]:
        try:
            prefix = staging_branch_prefix(ti.key, ti.staging_prefix)
            return client.list_branches(ti.repository, prefix, show_hidden=True), None
        except LakeFenceError as exc:
            return [], f"staging branches: {exc}"

    @staticmethod
    def _commit(client: Any, repository: str, ref: str) -> CommitInfo | None:
        try:
            commit: CommitInfo = client.get_commit(repository, ref)
        except LakeFSNotFoundError:
            return None  # garbage-collected: the row shows the id without its details
        except LakeFenceError:
            return None
        return commit
