"""What the stack tiers (real scheduler, Celery, and benchmarks/backfill_throughput.py) share: the
stack's fixture life cycle, and the helpers their tests use.

- :func:`stack_tier_hooks`: a tier conftest's report hook (each phase's report kept on the item,
  the tier's measured figures riding on it) and its autouse fixture that dumps the stack's logs
  after a failed test (:func:`remember_report` / :func:`failed_so_far`).
- :func:`create_repositories`, :func:`lakefs_connection`, :func:`one_slot_pools`: the lakeFS side
  of a tier's set-up.
- :func:`running_stack`: start a stack, wait for its DAGs, stop it at the end (logs dumped and home
  kept after a failure), and check that nothing it started survives.
- Helpers of the tests: :class:`Signals` (the job's ``.started``/``.done`` files), :class:`HeadRecorder`
  (every HEAD a branch shows), :func:`record_of`, :func:`history`, :func:`publications`,
  :func:`read_text`, :func:`staging_branches`, :func:`task_processes`, :func:`xcom`,
  :func:`run_backfill` and :func:`assert_linear_backfill`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import lakefs
import psutil
import pytest

from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, LakeFenceRecord, decode_metadata
from tests.stack.airflow_stack import AirflowAPI, AirflowStack, StackError, wait_for

#: Set to keep the Airflow home (logs) after a passing module too.
KEEP_HOME_ENV = "LAKEFENCE_TEST_KEEP_AIRFLOW_HOME"
REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()
FAILED = pytest.StashKey[bool]()


# -- the stack's life cycle ----------------------------------------------------------------------


def remember_report(item: pytest.Item, report: pytest.TestReport) -> None:
    """Keep a phase's report on its item (call from a ``pytest_runtest_makereport`` wrapper)."""
    item.stash.setdefault(REPORTS, {})[report.when] = report


def failed_so_far(node: pytest.Item) -> bool:
    """Whether any phase of the test failed so far."""
    return any(report.failed for report in node.stash.get(REPORTS, {}).values())


def stack_tier_hooks(
    tier: str, figures: Callable[[pytest.Item], Mapping[str, Any] | None], stack_fixture: str, *, session_wide: bool
) -> tuple[Any, Any]:
    """A tier conftest's ``pytest_runtest_makereport`` hook and its autouse log-dumping fixture.

    The hook keeps each phase's report on the item (so a fixture can tell whether its test failed) and
    lets the tier's figures ride on the report: tests/conftest.py prints them in the terminal summary
    (under pytest-xdist the tier runs in a worker; only reports reach the main process). The fixture
    dumps the stack's logs after a failed test and marks the failure (:data:`FAILED`) on the session
    (``session_wide``: one stack for the tier) or on the module (a stack per module).

    :param tier: the tier's name in the summary.
    :param figures: the figures measured so far, given the test item.
    :param stack_fixture: the name of the tier's stack fixture.
    """

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
        from tests.conftest import TIER_FIGURES_PROPERTY  # not at import: benchmarks use this module too

        report = yield
        remember_report(item, report)
        measured = figures(item)
        if measured:
            report.user_properties.append((f"{TIER_FIGURES_PROPERTY}{tier}", json.dumps(measured)))
        return report

    @pytest.fixture(autouse=True)
    def dump_logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
        stack = request.getfixturevalue(stack_fixture)
        yield
        if failed_so_far(request.node):
            failed_on(request, session_wide).stash[FAILED] = True
            stack.dump_logs()

    return pytest_runtest_makereport, dump_logs_on_failure


def failed_on(request: pytest.FixtureRequest, session_wide: bool) -> Any:
    """Where a tier marks a failed test: the session, or the test's module."""
    return request.session if session_wide else request.node.parent


def one_slot_pools(targets: Mapping[str, tuple[str, Iterable[str]]]) -> dict[str, int]:
    """One 1-slot pool per target branch of ``targets`` (``{dag_id: (repository, branches)}``)."""
    from tests.dags.dag_factory import stack_pool_name  # imports Airflow: not at this module's import

    return {stack_pool_name(repo, target): 1 for repo, branches in targets.values() for target in branches}


def lakefs_connection(endpoint: str, access_key_id: str, secret_access_key: str) -> dict[str, dict[str, Any]]:
    """The connections of a tier's stack: ``lakefs_default`` (the given lakeFS) and ``spark_local``."""
    return {
        "lakefs_default": {
            "conn_type": "lakefs",
            "host": endpoint,
            "login": access_key_id,
            "password": secret_access_key,
        },
        "spark_local": {"conn_type": "spark", "host": "local[2]"},
    }


def create_repositories(client: Any, namespace: str, targets: Mapping[str, tuple[str, Iterable[str]]]) -> None:
    """Create each repository of ``targets`` (``{dag_id: (repository, branches)}``) with its branches.

    A repository of the same name left by an earlier session on the same lakeFS is deleted first.

    :param client: a ``lakefs.Client``.
    :param namespace: prefix of the storage namespaces (``local://...``).
    """
    from lakefs.exceptions import NotFoundException

    for repository, branches in targets.values():
        repo = lakefs.Repository(repository, client=client)
        try:
            repo.delete()
        except NotFoundException:
            pass
        repo.create(storage_namespace=f"{namespace.rstrip('/')}/{repository}-{uuid.uuid4().hex[:8]}",
                    default_branch="main")
        for branch in branches:
            if branch != "main":
                repo.branch(branch).create(source_reference="main")


@contextlib.contextmanager
def running_stack(stack: AirflowStack, dag_ids: Iterable[str], failed: Any) -> Iterator[AirflowStack]:
    """Start ``stack``, wait until ``dag_ids`` are parsed, yield it, stop it; assert nothing survives.

    The home is kept (and its path printed) when ``failed()`` says a test failed, or with
    ``LAKEFENCE_TEST_KEEP_AIRFLOW_HOME`` set; a failed start dumps the logs and keeps it too.

    :param failed: a callable telling at teardown whether a test using the stack failed.
    """
    try:
        stack.start()
        stack.wait_for_dags(dag_ids)
    except BaseException:
        stack.dump_logs()
        stack.stop(remove_home=False)
        raise
    print(
        f"Airflow stack: db migrate {stack.migrate_seconds:.1f}s, components healthy {stack.boot_seconds:.1f}s "
        f"later, at {stack.base_url}, home {stack.home}, database {stack.database_url}"
    )
    try:
        yield stack
    finally:
        keep = bool(failed()) or bool(os.environ.get(KEEP_HOME_ENV))
        if keep:
            print(f"keeping the Airflow home {stack.home}")
        stopping = time.monotonic()
        late = stack.stop(remove_home=not keep)
        print(f"Airflow stack stopped in {time.monotonic() - stopping:.1f}s")
        if late:
            print(f"killed after the components stopped: {late}")
    leftovers = stack.marked_processes()
    assert not leftovers, f"processes survived the stack's teardown: {leftovers}"


# -- helpers of the tests ------------------------------------------------------------------------


class Signals:
    """The ``.started`` / ``.done`` files the test jobs write (see tests/stack/sched_job.py)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _read(self, suffix: str) -> list[dict[str, Any]]:
        found = []
        for path in sorted(self.directory.glob(f"*{suffix}")):
            found.append({**json.loads(path.read_text()), "staging": path.name.removesuffix(suffix)})
        return found

    def started(self, **match: Any) -> list[dict[str, Any]]:
        """Jobs that started, filtered by equal payload fields (``try``, ``target``)."""
        return [s for s in self._read(".started") if all(s.get(k) == v for k, v in match.items())]

    def done(self, **match: Any) -> list[dict[str, Any]]:
        """Jobs that finished writing their output."""
        return [s for s in self._read(".done") if all(s.get(k) == v for k, v in match.items())]

    def wait_started(self, timeout: float, **match: Any) -> dict[str, Any]:
        """Wait for one job matching ``match`` to have started."""
        return wait_for(f"a job {match} to start", lambda: (self.started(**match) or [None])[0], timeout)

    def job_spec(self, **spec: Any) -> dict[str, Any]:
        """A job spec reporting into this directory."""
        return {**spec, "signal_dir": str(self.directory)}


class HeadRecorder:
    """Record every distinct HEAD a branch shows while the test runs (polled every 50 ms)."""

    def __init__(self, repo: lakefs.Repository, branch: str) -> None:
        self.repo = repo
        self.branch = branch
        self.heads: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heads-{branch}", daemon=True)

    def _run(self) -> None:
        while True:
            try:
                head = self.repo.branch(self.branch).get_commit().id
                if not self.heads or self.heads[-1] != head:
                    self.heads.append(head)
            except Exception as exc:  # recorded, and asserted empty by the test
                self.errors.append(repr(exc))
            if self._stop.wait(0.05):
                return

    def __enter__(self) -> HeadRecorder:
        self._thread.start()
        wait_for(f"the first HEAD of {self.branch}", lambda: self.heads or self.errors, 10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


class Scenario(NamedTuple):
    """What a stack scenario starts from."""

    api: AirflowAPI
    dag_id: str
    repo: lakefs.Repository
    #: The target's HEAD before the scenario.
    base: str
    signals: Signals


def scenario(stack: AirflowStack, dag_id: str, repo: lakefs.Repository, tmp_path: Path) -> Scenario:
    """Start a scenario on a running stack: its API, the DAG, the repository, ``main``'s HEAD, the job's signals."""
    assert stack.api is not None
    return Scenario(stack.api, dag_id, repo, repo.branch("main").get_commit().id, Signals(tmp_path))


def repository(client: Any, name: str) -> lakefs.Repository:
    """A repository through a ``lakefs.Client``."""
    return lakefs.Repository(name, client=client)


def record_of(repo: lakefs.Repository, ref: str) -> tuple[Any, LakeFenceRecord | None]:
    """A commit and its lakefence record (``None`` for a commit lakefence did not write)."""
    commit = repo.ref(ref).get_commit()
    return commit, decode_metadata(commit.metadata)


def history(repo: lakefs.Repository, ref: str, first_parent: bool) -> list[Any]:
    """The commits reachable from ``ref``, newest first."""
    return list(repo.ref(ref).log(first_parent=first_parent))


def publications(repo: lakefs.Repository, ref: str) -> list[Any]:
    """The lakefence publish commits reachable from ``ref`` (all parents), newest first."""
    found = []
    for commit in history(repo, ref, False):
        record = decode_metadata(commit.metadata)
        if record is not None and record.role == ROLE_PUBLISH:
            found.append(commit)
    return found


def read_text(repo: lakefs.Repository, ref: str, path: str) -> str:
    """An object's text."""
    with repo.ref(ref).object(path).reader(mode="r", pre_sign=False) as fd:
        return str(fd.read())


def staging_branches(repo: lakefs.Repository) -> list[str]:
    """The lakefence branches left in the repository (hidden ones included)."""
    return [b.id for b in repo.branches(prefix="lakefence", show_hidden=True)]


def gone(pid: int) -> bool:
    """Whether a process has ended (a zombie counts as ended)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def task_processes(ti_id: str) -> list[str]:
    """The live task process of a task instance (the Task SDK titles it ``airflow worker -- <ti id>``).

    Only that title counts: an executor's worker process that supervised the try stays alive for the next one.
    """
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if cmdline.startswith("airflow worker --") and ti_id in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(f"{proc.pid} {cmdline}")
    return found


def _processes_naming(ti_id: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if ti_id in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(f"{proc.pid} {proc.info['status']} {cmdline[:200]}")
    return found


def wait_task_process_end(ti_id: str, what: str, timeout: float = 30) -> None:
    """Wait until the task process of ``ti_id`` has ended; name what still runs if it does not."""
    try:
        wait_for(f"{what}'s task process to end", lambda: not task_processes(ti_id), timeout)
    except StackError as exc:
        raise AssertionError(f"{exc}: {task_processes(ti_id)}; naming it: {_processes_naming(ti_id)}") from None


def timestamp(value: str) -> float:
    """An API timestamp in seconds since the epoch."""
    return datetime.fromisoformat(value).timestamp()


def xcom(api: AirflowAPI, dag_id: str, run_id: str, task_id: str, key: str) -> Any:
    """An XCom value through the REST API (JSON-decoded when it is a JSON string)."""
    body = api.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}")
    value = body["value"]
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def run_backfill(api: AirflowAPI, dag_id: str, job: dict[str, Any], timeout: float = 300) -> list[dict[str, Any]]:
    """Backfill 2026-01-01..05 (up to 5 runs active) and wait until all five succeeded or one failed.

    Created while the DAG is paused, then switched on (the dialog's "unpause" choice).

    :returns: the runs, oldest logical date first.
    """
    backfill = api.create_backfill(
        dag_id,
        "2026-01-01T00:00:00Z",
        "2026-01-05T00:00:00Z",
        # All five runs may be active at once: the DAG itself must keep the publications in order.
        max_active_runs=5,
        # Airflow requires a reprocess behaviour for DAGs with depends_on_past tasks.
        reprocess_behavior="failed",
        dag_run_conf={"job": job},
    )
    api.unpause(dag_id)

    def finished() -> list[dict[str, Any]] | None:
        runs = api.dag_runs(dag_id)
        if any(r["state"] == "failed" for r in runs):
            return runs
        return runs if len(runs) == 5 and all(r["state"] == "success" for r in runs) else None

    runs = wait_for("the backfill's five runs to finish", finished, timeout, interval=1)
    assert [r["state"] for r in runs] == ["success"] * 5, runs
    assert all(r["run_type"] == "backfill" for r in runs)
    assert [r["logical_date"][:10] for r in runs] == [f"2026-01-0{d}" for d in range(1, 6)]
    assert api.backfill(backfill["id"])["dag_id"] == dag_id
    return runs


def start_backfill(
    api: AirflowAPI, dag_id: str, days: list[str], conf: dict[str, Any], max_active_runs: int
) -> tuple[dict[str, Any], dict[str, str]]:
    """Backfill ``days`` (dates, oldest first) with every run's ``conf``, and wait until all its runs exist.

    Created while the DAG is paused, then switched on (the dialog's "unpause" choice).

    :returns: the backfill, and each date's run id.
    """
    backfill = api.create_backfill(
        dag_id,
        f"{days[0]}T00:00:00Z",
        f"{days[-1]}T00:00:00Z",
        max_active_runs=max_active_runs,
        dag_run_conf=conf,
    )
    api.unpause(dag_id)
    runs = wait_for(
        "the backfill's runs", lambda: (r := api.dag_runs(dag_id)) and len(r) == len(days) and r, 60, interval=1
    )
    run_of = {r["logical_date"][:10]: r["dag_run_id"] for r in runs}
    assert sorted(run_of) == days and all(r["run_type"] == "backfill" for r in runs)
    return backfill, run_of


def assert_linear_backfill(
    api: AirflowAPI, repo: lakefs.Repository, dag_id: str, runs: list[dict[str, Any]], base: str, heads: HeadRecorder
) -> list[dict[str, Any]]:
    """The target's history after :func:`run_backfill`: the input and five merges, one per run, in date order.

    Each merge is built on the previous one, the target never showed anything else, no staging
    branch is left, and the fenced tries (``publish``) never overlapped.

    :returns: the ``publish`` task instances, by run.
    """
    first_parent = history(repo, "main", True)
    assert [c.id for c in first_parent][-1] == base and len(first_parent) == 6
    merges = list(reversed(first_parent[:-1]))
    previous = base
    for run, commit in zip(runs, merges, strict=True):
        record = decode_metadata(commit.metadata)
        assert record is not None and record.role == ROLE_PUBLISH
        assert (record.attempt.key.run_id, record.attempt.try_number, record.input_ref) == (
            run["dag_run_id"],
            1,
            previous,
        )
        assert commit.parents[0] == previous
        assert commit.metadata["logical_date"][:10] == run["logical_date"][:10]
        assert xcom(api, dag_id, run["dag_run_id"], "publish", "input_ref") == previous
        assert xcom(api, dag_id, run["dag_run_id"], "publish", "output_ref") == commit.id
        previous = commit.id
    # One publication per run in the whole history, and the target never showed anything else.
    assert sorted(c.id for c in publications(repo, "main")) == sorted(c.id for c in merges)
    assert not heads.errors
    assert heads.heads == [base, *(c.id for c in merges)]
    windows = [api.task_instance(dag_id, r["dag_run_id"], "publish") for r in runs]
    for earlier, later in itertools.pairwise(windows):
        assert timestamp(earlier["end_date"]) <= timestamp(later["start_date"])  # through the 1-slot pool
    assert staging_branches(repo) == []
    return windows
