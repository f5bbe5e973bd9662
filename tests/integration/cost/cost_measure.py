"""What the cost tests measure with: uncounted scenario set-up, and snapshots of the counters per try.

Shared by the cost contract (tests/integration/cost/test_cost_contract.py, Airflow 3.3, both lakeFS
backends) and its run on every Airflow version (tests/integration/cost/test_cost_versions.py):

* :class:`Backdoor`: the scenario's state (history, the job's objects, a racing commit) made where
  the fault-injecting proxy does not count it (the local server's store in-process, or real
  lakeFS's own port);
* :class:`Probe`: snapshots of the proxy's per-operation counters and of the Airflow-side counter
  at each try's start (``pre_execute``) and at the protocol's failpoints, split into
  :class:`Attempt` (lakeFS calls before and after the job, the attempt fence's Airflow requests);
* :func:`run_publish`: one DAG run of a :class:`Scenario` (tests/dags/cost_dags.py, the
  ``cost_dags`` fixture), measured;
* :func:`execution_api_spy`: the Airflow 3 counter, a delegating spy on ``dag.test()``'s in-process
  Execution-API channel (``InProcessSupervisorComms.send``).
"""

from __future__ import annotations

import io
import os
import uuid
from collections import Counter
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import lakefs
import pytest

from airflow_lakefence import failpoints
from airflow_lakefence.airflow_adapter.attempt_fence import attempt_from_context
from airflow_lakefence.core.fences.hard import ACTION_PATH, forget_checks, render_action_bytes
from airflow_lakefence.core.names.staging_names import staging_branch_name
from airflow_lakefence.hardfence import install_hard_fence
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from airflow_lakefence.lakefs_adapter.run_state_store import RUN_STATE_BRANCH
from lakefence_testing.pytest_plugin import ENDPOINT_ENV, LakeFSServerInfo
from tests.integration.hard_fence_helpers import protect
from tests.integration.helpers import run_dag, update_ti, xcoms

#: On real lakeFS the job's objects are uploaded for real: the largest volume point is capped.
REAL_MAX_OBJECTS = 1000
#: Target branches named so are protected (module-wide rule; no other test's branch matches).
PROTECTED_PREFIX = "protected-"


class Backdoor:
    """Scenario set-up and inspection that no counter sees.

    On the local backend, the server's store in-process; on real lakeFS, its own port (not the
    proxy's), through the SDK.

    :param info: the session's lakeFS.
    :param repository: the module's repository (created by :meth:`create_repository`).
    """

    def __init__(self, info: LakeFSServerInfo, repository: str) -> None:
        self.info = info
        self.repository = repository
        self.store = info.server.store if info.is_local else None
        direct = info.server.url if info.server is not None else os.environ[ENDPOINT_ENV].removesuffix("/api/v1")
        self.direct = direct
        self.client = lakefs.Client(host=direct, username=info.access_key_id, password=info.secret_access_key)
        self.repo = lakefs.Repository(repository, client=self.client)

    def cap(self, objects: int) -> int:
        """How many objects a scenario of ``objects`` really stages on this backend."""
        return objects if self.store is not None else min(objects, REAL_MAX_OBJECTS)

    def create_repository(self) -> None:
        namespace = f"{self.info.storage_namespace.rstrip('/')}/{self.repository}"
        self.repo.create(storage_namespace=namespace, default_branch="main")
        # The run-state branch exists after the first record in a repository (its creation, two
        # calls once per repository, is pinned by test_the_first_run_state_record_of_a_repository).
        self.create_branch(RUN_STATE_BRANCH, "main")

    def create_branch(self, name: str, ref: str) -> None:
        if self.store is not None:
            self.store.create_branch(self.repository, name, ref)
        else:
            self.repo.branch(name).create(ref)

    def commit(self, branch: str, message: str, allow_empty: bool = True) -> str:
        if self.store is not None:
            return str(self.store.commit(self.repository, branch, message, allow_empty=allow_empty).id)
        return str(self.repo.branch(branch).commit(message, allow_empty=allow_empty).get_commit().id)

    def get_commit(self, ref: str) -> Any:
        """The commit ``ref`` names (``id``, ``parents``, ``metadata``)."""
        if self.store is not None:
            return self.store.get_commit(self.repository, ref)
        return self.repo.ref(ref).get_commit()

    def stage(self, branch: str, paths: list[str], content: bytes) -> None:
        """Leave ``paths`` uncommitted on ``branch``, all with ``content``: what a direct-mode job leaves."""
        if self.store is not None:
            _stage(self.store, self.repository, branch, paths, self.store.put_blob(io.BytesIO(content)))
            return
        target = self.repo.branch(branch)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda path: target.object(path).upload(content), paths))

    def count_objects(self, ref: str, prefix: str = "out/") -> int:
        """How many objects ``ref`` holds under ``prefix``."""
        if self.store is None:
            return sum(1 for _ in self.repo.ref(ref).objects(prefix=prefix, max_amount=None))
        total, after = 0, ""
        while True:
            page = self.store.list_objects(self.repository, ref, prefix=prefix, after=after, delimiter="", limit=1000)
            total += len(page.items)
            if not page.has_more:
                return total
            after = page.items[-1][0]

    def branches(self, prefix: str) -> list[str]:
        if self.store is not None:
            refs, _ = self.store.list_refs(self.repository, "branches", prefix, "", 100)
            return [name for name, _ in refs]
        return [b.id for b in self.repo.branches(prefix=prefix, show_hidden=True)]

    def hard_reset(self, branch: str, ref: str) -> None:
        """Point ``branch`` at ``ref`` (an unprotected branch)."""
        if self.store is not None:
            self.store.hard_reset(self.repository, branch, ref)
        else:
            self.client.sdk_client.experimental_api.hard_reset_branch(self.repository, branch, ref)

    def install_hard_fence(self, branch: str) -> str:
        """Install the hard fence on ``branch`` (the product's installer, on the uncounted port); its new head."""
        adapter = LakeFSClient(self.direct, self.info.access_key_id, self.info.secret_access_key)
        return install_hard_fence(adapter, self.repository, branch).head

    def protect(self, pattern: str, probe_branch: str) -> None:
        """Protect the branches matching ``pattern``; return once lakeFS enforces it on ``probe_branch``."""
        protect(self.client, self.repo, pattern, probe_branch=probe_branch)


def _stage(store: Any, repository: str, branch: str, paths: list[str], blob: Any) -> None:
    """Stage ``paths`` on ``branch`` uncommitted, in one store transaction: what a direct-mode job
    leaves behind, without 10,000 counted uploads (through the SDK that takes about 30 s)."""
    with store.write() as tx:
        entry = tx.add_entry(
            address=f"local://cost/{repository}/data/{uuid.uuid4().hex}",
            blob=blob.sha256,
            checksum=blob.md5,
            size=blob.size,
            mtime=0,
            content_type="application/octet-stream",
            metadata={},
        )
        for path in paths:
            tx.stage(repository, branch, path, entry)


def _current() -> tuple[int, str]:
    """(try number, staging branch) of the running attempt, from inside a failpoint callback."""
    from airflow.providers.common.compat.sdk import get_current_context

    context = get_current_context()
    attempt = attempt_from_context(context)
    return attempt.try_number, staging_branch_name(attempt, "lakefence")


@dataclass
class Mark:
    label: str
    try_number: int
    lakefs: Counter[str]
    airflow: Counter[str]
    rounds: int = 0


#: Latency the proxy adds to every lakeFS request while a scenario runs: calls sent side by side
#: then meet in the proxy for sure, so its serial round trips count them as one.
ROUND_LATENCY = 0.03


@dataclass
class Attempt:
    """The calls of one try, split at the Spark job."""

    before: dict[str, int]
    after: dict[str, int]
    fence_checks: list[dict[str, int]] = field(default_factory=list)
    fence_arm: dict[str, int] = field(default_factory=dict)
    #: serial round trips to lakeFS before and after the job (calls sent side by side count once)
    rounds_before: int = 0
    rounds_after: int = 0
    #: of ``rounds_after``, those from the staged commit on (the publish and the report; the job's
    #: uploads in workspace mode come before it)
    rounds_published: int = 0

    @property
    def total(self) -> int:
        return sum(self.before.values()) + sum(self.after.values())


class Probe:
    """Snapshots of both counters at the try boundaries and protocol points."""

    def __init__(self, controls: Any, api_calls: Counter[str], fence_messages: Collection[str]) -> None:
        self.controls = controls
        self.api_calls = api_calls
        self.fence_messages = frozenset(fence_messages)
        self.marks: list[Mark] = []

    def mark(self, label: str, try_number: int) -> None:
        self.marks.append(
            Mark(label, try_number, Counter(self.controls.counts()), Counter(self.api_calls), self.controls.rounds())
        )

    def attempts(self) -> dict[int, Attempt]:
        """The calls of every try; a try ends where the next one starts (or at the ``end`` mark)."""
        result: dict[int, Attempt] = {}
        starts = [i for i, m in enumerate(self.marks) if m.label == "start"]
        for n, first in enumerate(starts):
            last = starts[n + 1] if n + 1 < len(starts) else len(self.marks) - 1
            span = self.marks[first : last + 1]
            by_label = {m.label: m for m in span}
            start, end = span[0], span[-1]
            job = by_label.get("after_job", end)
            attempt = Attempt(dict(job.lakefs - start.lakefs), dict(end.lakefs - job.lakefs))
            attempt.rounds_before, attempt.rounds_after = job.rounds - start.rounds, end.rounds - job.rounds
            if "after_stage" in by_label:
                attempt.rounds_published = end.rounds - by_label["after_stage"].rounds
            attempt.fence_arm = {k: v for k, v in (job.airflow - start.airflow).items() if k in self.fence_messages}
            spans = (("after_job", "after_fence_1"), ("after_stage", "after_fence_2"), ("after_verify", "after_xcom"))
            for a, b in spans:
                if a in by_label and b in by_label:
                    # The last span also holds the XCom pushes of the report: keep the fence's calls.
                    calls = by_label[b].airflow - by_label[a].airflow
                    attempt.fence_checks.append({k: v for k, v in calls.items() if k in self.fence_messages})
            result[start.try_number] = attempt
        return result


@dataclass
class Scenario:
    """What happens around the job in one run."""

    objects: int = 1  # objects the job changes on each try (direct mode: staged on the staging branch)
    objects_on_retry: int | None = None  # objects on try >= 2, when different
    die_after_publishing: bool = False  # try 1 raises after verifying its publication (worker death)
    die_on_tries: tuple[int, ...] = (1,)  # the tries that die so, with die_after_publishing
    leave_staging_behind: bool = False  # ...and its staging branch survives (a hard crash)
    foreign_commit_during_job: bool = False
    foreign_commit_before_run: bool = False
    mark_stale_after_stage: str | None = None  # "failed" or "clear": the UI acts on the running try
    # The hard-fence DAGs (workspace mode, with objects=0): {try number: {path: text}} each try writes.
    files_by_try: dict[int, dict[str, str]] = field(default_factory=dict)
    protected: bool = False  # the target matches the module's branch protection rule
    # Try 1's publication is taken off the target before try 2 starts and lands again during try 2's
    # job: a zombie try 1 publishing late (set up through the backdoor: no counted call).
    zombie_publishes_during_retry_job: bool = False
    # The target starts here instead of at the input (a commit the input is an ancestor of), and gets
    # one more commit changing a path outside the write set: a target that moved past the input.
    target_from: str | None = None
    disjoint_commit_on_target: bool = False
    # A direct-mode job that also rewrites the hard fence's action file in its staging branch (the
    # same hook, plus a comment): the staged commit changed the actions' directory.
    rewrite_action_file: bool = False


@dataclass
class Run:
    dag_run: Any
    input_commit: str
    target: str
    attempts: dict[int, Attempt]
    xcom: dict[str, Any]
    published_before_death: list[str]
    foreign: list[str]
    marks: list[Mark]


def run_publish(
    server: Backdoor,
    controls: Any,
    api_calls: Counter[str],
    dags: Any,
    dag: Any,
    input_commit: str,
    scenario: Scenario,
    job: dict[str, Any] | None = None,
    *,
    fence_messages: Collection[str],
) -> Run:
    """Run ``dag`` once on a fresh target branch at ``input_commit`` and measure every try.

    Every try starts as in a fresh worker process: the hard-fence check's per-process memory is cleared.
    """
    target = f"{PROTECTED_PREFIX if scenario.protected else 'target-'}{uuid.uuid4().hex[:12]}"
    server.create_branch(target, scenario.target_from or input_commit)
    foreign: list[str] = []
    if scenario.disjoint_commit_on_target:
        server.stage(target, ["other/part-0"], b"another writer's partition")
        foreign.append(server.commit(target, "another writer", allow_empty=False))
    if scenario.foreign_commit_before_run:
        foreign.append(server.commit(target, "someone else"))
    probe = Probe(controls, api_calls, fence_messages)
    published: list[str] = []

    def points(name: str, *actions: Callable[[int], None]) -> None:
        def callback() -> None:
            try_number, _ = _current()
            for action in actions:
                action(try_number)
            probe.mark(name, try_number)

        failpoints.arm(name, callback)

    def stage_job_output(try_number: int) -> None:
        count = scenario.objects
        if try_number > 1 and scenario.objects_on_retry is not None:
            count = scenario.objects_on_retry
        count = server.cap(count)
        if count:
            _, staging = _current()
            server.stage(staging, [f"out/part-{n:05d}" for n in range(count)], f"try {try_number} of {target}".encode())
        if scenario.rewrite_action_file:
            _, staging = _current()
            server.stage(staging, [ACTION_PATH], render_action_bytes() + b"# rewritten by the job\n")

    def race(try_number: int) -> None:
        if scenario.foreign_commit_during_job:
            foreign.append(server.commit(target, "racer"))
        if scenario.zombie_publishes_during_retry_job and try_number == 2:
            server.hard_reset(target, published[0])

    def stale(try_number: int) -> None:
        if scenario.mark_stale_after_stage == "clear":
            update_ti(dag.dag_id, "publish", clear=True)
        elif scenario.mark_stale_after_stage:
            update_ti(dag.dag_id, "publish", state=scenario.mark_stale_after_stage)

    def die(try_number: int) -> None:
        if scenario.die_after_publishing and try_number in scenario.die_on_tries:
            published.append(server.get_commit(target).id)
            if scenario.leave_staging_behind:
                # The dying worker never gets to delete its staging branch.
                controls.add_fault("deleteBranch", status=503)
            raise RuntimeError("worker died after publishing")

    points("after_staging_branch", stage_job_output)
    points("after_job", race)
    points("after_fence_1")
    points("after_stage", stale)
    points("after_fence_2")
    points("after_verify", die)
    points("after_xcom")

    def try_start(context: Any) -> None:
        try_number = int(context["ti"].try_number)
        forget_checks()  # a new worker process remembers no hard-fence check
        if scenario.zombie_publishes_during_retry_job and try_number == 2:
            server.hard_reset(target, input_commit)  # the zombie's publication has not landed yet
        probe.mark("start", try_number)

    dags.PROBE["try_start"] = try_start

    controls.reset_counts()
    api_calls.clear()
    conf: dict[str, Any] = {"repository": server.repository, "target": target, "input_ref": input_commit}
    conf["job"] = job or {}
    if scenario.files_by_try:
        conf["files_by_try"] = {str(n): files for n, files in scenario.files_by_try.items()}
    controls.set_latency(ROUND_LATENCY)
    try:
        dag_run = run_dag(dag, conf)
    finally:
        controls.set_latency(0)
    probe.mark("end", 0)
    return Run(
        dag_run, input_commit, target, probe.attempts(), xcoms(dag_run, "publish"), published, foreign, probe.marks
    )


def plus(*rows: dict[str, int]) -> dict[str, int]:
    """The calls of ``rows`` together."""
    total: Counter[str] = Counter()
    for row in rows:
        total.update(row)
    return dict(total)


def execution_api_spy(monkeypatch: pytest.MonkeyPatch, label: Callable[[Any], str] | None = None) -> Counter[str]:
    """Count every Execution-API request the task sends under ``dag.test()`` (Airflow 3), by
    ``label(msg)`` (default: the message type), delegating to the real channel.

    :param monkeypatch: the test's monkeypatch (undoes the spy).
    :param label: names a message in the counter.
    """
    from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms

    calls: Counter[str] = Counter()
    real_send = InProcessSupervisorComms.send
    name = label or (lambda msg: type(msg).__name__)

    def send(self: Any, msg: Any) -> Any:
        calls[name(msg)] += 1
        return real_send(self, msg)

    monkeypatch.setattr(InProcessSupervisorComms, "send", send)
    return calls
