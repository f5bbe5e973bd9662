"""Reliability scenarios: attempts in separate processes, a foreign writer, and the invariants.

Used by the pytest modules of this package and by the randomized sweep
(``python -m tests.reliability.sweep``). Everything here talks to lakeFS through the real SDK and
reads the Airflow side from the :class:`~tests.reliability.registry.AttemptRegistry`.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lakefs

from airflow_lakefence.core.fences.hard import is_chain_link
from airflow_lakefence.core.names.keys import PublicationKey
from airflow_lakefence.core.names.staging_names import staging_branch_prefix
from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.failpoints import CRASH_EXIT_CODE, ENV_VAR, POINTS
from airflow_lakefence.hardfence import install_hard_fence
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from tests.reliability.registry import AttemptRegistry

REPO = Path(__file__).resolve().parent.parent.parent
DAG_ID = "reliability"
TASK_ID = "publish"
TARGET = "main"
ATTEMPT_TIMEOUT = 180.0
_TRY_RE = re.compile(r"-t(\d+)-[0-9a-f]{8}$")


@dataclass(frozen=True)
class Lake:
    """Where the lakeFS server is.

    :param url: base URL (no ``/api/v1``).
    :param access_key_id: the access key id.
    :param secret_access_key: the secret.
    :param storage_namespace: where new repositories' storage namespaces go.
    """

    url: str
    access_key_id: str
    secret_access_key: str
    storage_namespace: str = "local://reliability"

    def client(self) -> lakefs.Client:
        """A new SDK client."""
        return lakefs.Client(host=self.url, username=self.access_key_id, password=self.secret_access_key)

    def connection(self, **overrides: Any) -> str:
        """The ``lakefs_default`` Airflow connection as an ``AIRFLOW_CONN_*`` JSON value."""
        conn = {
            "conn_type": "lakefs",
            "host": self.url,
            "login": self.access_key_id,
            "password": self.secret_access_key,
            **overrides,
        }
        return json.dumps(conn)


def attempt_env(lake: Lake, home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a driver process: an Airflow home, the connections, this repository."""
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR and not k.startswith("PYTEST")}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "AIRFLOW_CONN_LAKEFS_DEFAULT": lake.connection(),
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra or {})
    return env


def new_repository(lake: Lake, files: Mapping[str, str] | None = None) -> tuple[lakefs.Repository, str]:
    """Create a repository whose ``main`` holds one input commit; return it and the commit id."""
    name = f"rel-{uuid.uuid4().hex[:16]}"
    repo = lakefs.Repository(name, client=lake.client()).create(
        storage_namespace=f"{lake.storage_namespace.rstrip('/')}/{name}", default_branch=TARGET
    )
    main = repo.branch(TARGET)
    for path, text in (files or {"in/data.txt": "input"}).items():
        main.object(path).upload(text.encode(), pre_sign=False)
    return repo, main.commit("input").get_commit().id


# -- processes --------------------------------------------------------------------------------


class Proc:
    """A process started by a :class:`Launcher`."""

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit code; raise :class:`subprocess.TimeoutExpired` after ``timeout``."""
        raise NotImplementedError

    def poll(self) -> int | None:
        """The exit code, or ``None`` while running."""
        raise NotImplementedError

    def kill(self) -> None:
        """SIGKILL the process."""
        raise NotImplementedError


class _Popen(Proc):
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def poll(self) -> int | None:
        return self.proc.poll()

    def kill(self) -> None:
        self.proc.kill()


class Launcher:
    """Starts attempt drivers and foreign writers as separate processes."""

    def launch(self, target: str, spec_path: Path, log_path: Path, env: Mapping[str, str]) -> Proc:
        """Start ``python -m tests.reliability.<target> SPEC`` (``driver`` or ``foreign_writer``)."""
        module = "driver" if target == "driver" else "foreign_writer"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", f"tests.reliability.{module}", str(spec_path)],
                cwd=REPO,
                env=dict(env),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return _Popen(proc)

    def close(self) -> None:
        """Release resources."""


class _Forked(Proc):
    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid

    def wait(self, timeout: float | None = None) -> int:
        return self.server.wait(self.pid, timeout)

    def poll(self) -> int | None:
        with self.server.cond:
            return self.server.codes.get(self.pid)

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class ForkServer(Launcher):
    """Forks each process from one pre-imported server (see ``forkserver.py``): milliseconds per start.

    :param env: the server's environment (Airflow home and configuration); each request brings its own.
    """

    def __init__(self, env: Mapping[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.forkserver"],
            cwd=REPO,
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.cond = threading.Condition()
        self.pids: dict[str, int] = {}
        self.codes: dict[int, int] = {}
        self._write_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="forkserver-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            with self.cond:
                if "id" in message:
                    self.pids[message["id"]] = message["pid"]
                else:
                    self.codes[message["pid"]] = message["code"]
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def launch(self, target: str, spec_path: Path, log_path: Path, env: Mapping[str, str]) -> Proc:
        request_id = uuid.uuid4().hex
        request = {"id": request_id, "target": target, "spec": str(spec_path), "log": str(log_path), "env": dict(env)}
        with self._write_lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        with self.cond:
            if not self.cond.wait_for(lambda: request_id in self.pids or self.proc.poll() is not None, 120):
                raise TimeoutError("the fork server did not start the process")
            if request_id not in self.pids:
                raise RuntimeError(f"the fork server exited with {self.proc.poll()}")
            return _Forked(self, self.pids[request_id])

    def wait(self, pid: int, timeout: float | None) -> int:
        """The exit code of a forked child."""
        with self.cond:
            if not self.cond.wait_for(lambda: pid in self.codes or self.proc.poll() is not None, timeout):
                raise subprocess.TimeoutExpired(f"pid {pid}", timeout or 0)
            if pid not in self.codes:
                raise RuntimeError(f"the fork server exited with {self.proc.poll()}")
            return self.codes[pid]

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- attempts ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    """How one attempt process ended.

    :param name: ``try1``, ``try2``...
    :param ti_id: its task-instance id.
    :param returncode: the process exit code.
    :param result: the driver's outcome file (empty after a crash).
    :param log: the process's stdout and stderr.
    """

    name: str
    ti_id: str
    returncode: int
    result: dict[str, Any]
    log: str

    @property
    def crashed(self) -> bool:
        """Whether the process died at an injected crash point."""
        return self.returncode == CRASH_EXIT_CODE

    @property
    def succeeded(self) -> bool:
        """Whether execute() returned."""
        return self.returncode == 0 and self.result.get("status") == "success"

    @property
    def error_type(self) -> str | None:
        """The exception class name, for a failed attempt."""
        return self.result.get("type") if self.result.get("status") == "error" else None

    def raised(self, class_name: str) -> bool:
        """Whether the attempt raised ``class_name`` or a subclass of it."""
        return self.result.get("status") == "error" and class_name in self.result.get("types", [])


@dataclass
class Attempt:
    """A running attempt process."""

    name: str
    ti_id: str
    proc: Proc
    result_path: Path
    log_path: Path

    def wait(self, timeout: float = ATTEMPT_TIMEOUT) -> Outcome:
        """Wait for the process and read its outcome."""
        try:
            returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            returncode = self.proc.wait()
        result: dict[str, Any] = {}
        if self.result_path.exists():
            result = json.loads(self.result_path.read_text())
        ti_id = self.ti_id or result.get("ti_id", "")
        return Outcome(self.name, ti_id, returncode, result, self.log_path.read_text(errors="replace"))


def spawn_attempt(
    launcher: Launcher,
    workdir: Path,
    env: Mapping[str, str],
    registry: AttemptRegistry,
    operator: Mapping[str, Any],
    job: Mapping[str, Any],
    *,
    ti_id: str | None = None,
    await_try: tuple[PublicationKey, int, float] | None = None,
    delays: Mapping[str, float] | None = None,
    waits: Mapping[str, list[Any]] | None = None,
    crash_at: str | None = None,
    spec_extra: Mapping[str, Any] | None = None,
) -> Attempt:
    """Start one attempt of the fenced task in its own process (see ``driver.py``).

    :param ti_id: run this existing task instance at once; or
    :param await_try: ``(key, try_number, delay)``: start the process now, run the try when the
        scheduler mints it (plus ``delay`` seconds).
    :param delays: seconds to sleep at failpoints.
    :param waits: ``{failpoint: [who, what, point]}``: block there until the timeline shows that event
        (``point``, optional: a failpoint name or the event detail's fields, as
        :meth:`~tests.reliability.registry.AttemptRegistry.wait_for` takes them).
    :param crash_at: a failpoint where the process exits at once (a crash).
    :param spec_extra: more driver spec keys (``who_prefix``, ``lose_merge_answer``).
    """
    spec: dict[str, Any] = {
        "registry": registry.path,
        "operator": dict(operator),
        "job": dict(job),
        "delays": dict(delays or {}),
        "waits": dict(waits or {}),
        **dict(spec_extra or {}),
    }
    if ti_id is not None:
        spec["ti_id"] = ti_id
        number = registry.ti(ti_id).try_number
        tag = ti_id[:8]
    else:
        assert await_try is not None
        key, number, delay = await_try
        spec["await_try"] = {
            "dag_id": key.dag_id,
            "run_id": key.run_id,
            "task_id": key.task_id,
            "try_number": number,
            "delay": delay,
        }
        tag = "await"
    name = f"try{number}"
    spec_path = workdir / f"{name}-{tag}.json"
    result_path = workdir / f"{name}-{tag}.result.json"
    log_path = workdir / f"{name}-{tag}.log"
    spec["result"] = str(result_path)
    spec_path.write_text(json.dumps(spec))
    proc_env = dict(env)
    if crash_at is not None:
        proc_env[ENV_VAR] = f"{crash_at}=exit"
    proc = launcher.launch("driver", spec_path, log_path, proc_env)
    return Attempt(name, ti_id or "", proc, result_path, log_path)


def run_attempt(
    launcher: Launcher,
    workdir: Path,
    env: Mapping[str, str],
    registry: AttemptRegistry,
    operator: Mapping[str, Any],
    job: Mapping[str, Any],
    ti_id: str,
    *,
    crash_at: str | None = None,
) -> Outcome:
    """Run one attempt to its end (or its crash) and return how it ended."""
    return spawn_attempt(launcher, workdir, env, registry, operator, job, ti_id=ti_id, crash_at=crash_at).wait()


def spawn_foreign_writer(
    launcher: Launcher,
    workdir: Path,
    env: Mapping[str, str],
    lake: Lake,
    registry: AttemptRegistry,
    repository: str,
    *,
    schedule: Iterable[float] = (),
    style: str = "commit",
    steps: Iterable[Mapping[str, Any]] | None = None,
    paths: Iterable[str] = (),
    epoch_who: str = "try1",
) -> Proc:
    """Start the foreign writer process (see ``foreign_writer.py``): timed writes, or ``steps``."""
    spec: dict[str, Any] = {
        "registry": registry.path,
        "url": lake.url,
        "access_key_id": lake.access_key_id,
        "secret_access_key": lake.secret_access_key,
        "repository": repository,
        "target": TARGET,
    }
    if steps is not None:
        spec["steps"] = [dict(step) for step in steps]
    else:
        spec["schedule"] = list(schedule)
        spec["style"] = style
        spec["paths"] = list(paths)
        spec["epoch_who"] = epoch_who
    spec_path = workdir / "foreign.json"
    spec_path.write_text(json.dumps(spec))
    return launcher.launch("foreign", spec_path, workdir / "foreign.log", env)


# -- the target's history ---------------------------------------------------------------------


@dataclass(frozen=True)
class CommitView:
    """A commit as the invariants need it."""

    id: str
    parents: tuple[str, ...]
    metadata: Mapping[str, str]


class History:
    """Cached commit reads of one repository."""

    def __init__(self, repo: lakefs.Repository) -> None:
        self.repo = repo
        self._cache: dict[str, CommitView] = {}

    def commit(self, ref: str) -> CommitView:
        """The commit ``ref`` points at."""
        if ref in self._cache:
            return self._cache[ref]
        c = self.repo.ref(ref).get_commit()
        view = CommitView(c.id, tuple(c.parents), dict(c.metadata or {}))
        self._cache[c.id] = view
        return view

    def head(self, branch: str = TARGET) -> str:
        """The branch's HEAD commit id (never cached)."""
        return str(self.repo.branch(branch).get_commit().id)

    def first_parent_chain(self, start: str, stop: str, limit: int = 200) -> list[CommitView] | None:
        """Commits from ``start`` down the first-parent line until ``stop`` (exclusive); ``None`` if not met."""
        chain: list[CommitView] = []
        ref = start
        for _ in range(limit):
            if ref == stop:
                return chain
            view = self.commit(ref)
            chain.append(view)
            if not view.parents:
                return None
            ref = view.parents[0]
        return None

    def reachable(self, start: str, target: str, limit: int = 2000) -> bool:
        """Whether ``target`` is ``start`` or one of its ancestors."""
        seen: set[str] = set()
        pending = [start]
        while pending and len(seen) < limit:
            ref = pending.pop()
            if ref == target:
                return True
            if ref in seen:
                continue
            seen.add(ref)
            pending.extend(self.commit(ref).parents)
        return False


def try_of_staging(name: str) -> int | None:
    """The try number in a staging branch name (``...-t2-abcdef12``)."""
    match = _TRY_RE.search(name.strip())
    return int(match.group(1)) if match else None


def visible_tries(repo: lakefs.Repository, ref: str, stamp_path: str | None, part_prefix: str | None) -> set[int]:
    """The tries whose output is visible at ``ref`` (stamp file and per-attempt part files)."""
    tries: set[int] = set()
    if stamp_path:
        try:
            with repo.ref(ref).object(stamp_path).reader(mode="r", pre_sign=False) as fd:
                number = try_of_staging(str(fd.read()))
        except lakefs.exceptions.NotFoundException:
            number = None
        if number is not None:
            tries.add(number)
    if part_prefix:
        for obj in repo.ref(ref).objects(prefix=part_prefix):
            number = try_of_staging(obj.path.removesuffix(".txt"))
            if number is not None:
                tries.add(number)
    return tries


def leftover_staging(repo: lakefs.Repository, key: PublicationKey) -> list[str]:
    """Staging branches of ``key`` still in the repository (hidden ones included)."""
    return [b.id for b in repo.branches(prefix=staging_branch_prefix(key), show_hidden=True)]


class RegistryView:
    """The cleaner's and the sensor's view of Airflow (``AirflowView``), answered by the registry."""

    def __init__(self, registry: AttemptRegistry) -> None:
        self.registry = registry

    def task_states(self, dag_id: str, task_ids: list[str], run_ids: list[str] | None = None) -> Any:
        """``{run_id: {task_id: state}}`` of the current task instances."""
        return self.registry.task_states(dag_id, run_ids, task_ids)

    def output_ref(self, key: PublicationKey) -> Any:
        """The ``output_ref`` XCom a downstream task would read."""
        return self.registry.visible_xcoms(of=key).get("output_ref")

    def supersedes(self, key: PublicationKey) -> Any:
        """The ``supersedes`` XCom a try pushes when it replaces a successful publication."""
        return self.registry.visible_xcoms(of=key).get("supersedes")

    def evidence(self, key: PublicationKey) -> Any:
        """The ``evidence`` XCom (the run's evidence branches) a try pushes when it keeps or succeeds."""
        return self.registry.visible_xcoms(of=key).get("evidence")


def judge_head(lake: Lake, repository: str, registry: AttemptRegistry, branch: str = TARGET) -> Any:
    """What ``AbandonedPublicationSensor`` would report about ``branch``'s HEAD (its probe, one poke)."""
    from airflow_lakefence.lakefs_adapter.client import LakeFSClient
    from airflow_lakefence.triggers.probes import probe_abandoned

    client = LakeFSClient(lake.url, lake.access_key_id, lake.secret_access_key)
    return probe_abandoned(
        client, RegistryView(registry), repository=repository, branch=branch, scope=None, staging_prefix="lakefence"
    )


def run_cleaner(
    lake: Lake, repository: str, registry: AttemptRegistry, *, delete_evidence: bool = False
) -> dict[str, Any]:
    """Run ``LakeFSStagingCleanupOperator``'s decisions and deletes against the registry's Airflow state.

    :param delete_evidence: the cleaner's ``delete_evidence`` (also delete kept evidence branches).

    :return: the cleaner's report (``deleted``, ``kept``).
    """
    from airflow_lakefence.core.staging.cleaner import inspect_branch
    from airflow_lakefence.lakefs_adapter.client import LakeFSClient
    from airflow_lakefence.operators.cleanup import LakeFSStagingCleanupOperator

    client = LakeFSClient(lake.url, lake.access_key_id, lake.secret_access_key)
    cleaner = LakeFSStagingCleanupOperator(
        task_id="clean", repository=repository, publishers=[(DAG_ID, TASK_ID)], delete_evidence=delete_evidence
    )
    branches = []
    for name, head in client.list_branches(repository, "lakefence-", show_hidden=True):
        branch = inspect_branch(name, head, client.get_commit(repository, head).metadata, "lakefence")
        if branch is not None:
            branches.append(branch)
    return cleaner.clean(client, RegistryView(registry), branches, {}, time.time())


# -- invariants -------------------------------------------------------------------------------

#: Error types an attempt may end with in a race, by role.
STALE_ALLOWED = {"StaleAttemptError", "PublishFenceError"}
CURRENT_ALLOWED = {"PublishFenceError"}


@dataclass
class Verdict:
    """What the invariants found for one scenario.

    ``violations`` break a promise; ``holes`` are the documented limits of the soft fence, each
    observed and named (never hidden); ``notes`` describe the run.
    """

    violations: list[str] = field(default_factory=list)
    holes: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No violation."""
        return not self.violations


def check_invariants(
    repo: lakefs.Repository,
    key: PublicationKey,
    input_commit: str,
    outcomes: Mapping[str, Outcome],
    registry: AttemptRegistry,
    *,
    current: str,
    stamp_path: str | None = "out/stamp.txt",
    part_prefix: str | None = None,
    secret: str | None = None,
    hard_resets: bool = True,
) -> Verdict:
    """Check the reliability invariants on the final state.

    :param outcomes: every attempt by name (``try1``...), crashed ones included.
    :param current: the name of the attempt that is the current try at the end.
    :param hard_resets: whether replacements were hard resets (the soft fence's documented window
        for losing a foreign commit); merge-only replacements (the hard fence) have no such excuse.
    """
    verdict = Verdict()
    history = History(repo)
    events = registry.events()
    head = history.head()
    verdict.notes["head"] = head
    by_ti = {o.ti_id: o for o in outcomes.values()}
    cur = outcomes[current]

    # 1. The input stays on the target's first-parent line: nothing below it was rewritten.
    chain = history.first_parent_chain(head, input_commit)
    if chain is None:
        verdict.violations.append(f"input {input_commit} is not on the first-parent history of HEAD {head}")
        return verdict

    # 2. Every commit above the input is explained: a publication of this key, or a foreign commit.
    foreign_acked = {e["detail"]["id"]: e for e in events if e["what"] == "foreign_commit"}
    publications: list[tuple[CommitView, Any]] = []
    stacked: set[str] = set()
    for view in chain:
        record = decode_metadata(view.metadata)
        if record is not None and record.attempt.key == key:
            publications.append((view, record))
        elif view.id not in foreign_acked:
            verdict.violations.append(f"unexplained commit {view.id} on the target")
    verdict.notes["chain"] = [
        ("P" if any(v.id == p.id for p, _ in publications) else "F") + ":" + v.id[:8] for v in chain
    ]

    # 3. Every publication not built directly on the input was made by a racing attempt, which must
    #    have said so with PublishRaceError (verification after acting).
    for view, record in publications:
        if view.parents[:1] == (input_commit,):
            continue
        if view.parents and is_chain_link(view.metadata, view.parents[0]):
            continue  # a merge-only replacement on the publication it replaced (checked by lakeFS)
        author = by_ti.get(record.attempt.ti_id)
        if author is None or not author.raised("PublishRaceError"):
            verdict.violations.append(
                f"publication {view.id[:8]} of try {record.attempt.try_number} is not on the input and its "
                f"attempt did not raise PublishRaceError ({None if author is None else author.result.get('type')})"
            )
        elif author.name != current and cur.succeeded:
            # Detected by the stale attempt's verification, but Airflow shows the current try's success.
            verdict.holes.append("stale_merge_stacked")
            stacked.add(view.id)
        else:
            verdict.notes["race_reported"] = verdict.notes.get("race_reported", 0) + 1
    if len([1 for view, _ in publications if view.parents[:1] == (input_commit,)]) > 1:
        verdict.violations.append("more than one publication of the key directly on the input")

    # 4. No acknowledged foreign commit is lost, except by the documented hard-reset window.
    resets = [
        e
        for e in events
        if hard_resets
        and e["what"] == "decision"
        and not e["detail"].get("early")
        and e["detail"]["action"] in ("replace", "relocate")
    ]
    for fid, event in foreign_acked.items():
        if history.reachable(head, fid):
            continue
        explained = any(r["at"] < event["at"] and history.reachable(fid, r["detail"]["head"]) for r in resets)
        if explained:
            verdict.holes.append("hard_reset_dropped_foreign_commit")
        else:
            verdict.violations.append(f"foreign commit {fid[:8]} was lost")

    # 5. A stale attempt never ends with its data visible, unless it was reported.
    visible = visible_tries(repo, head, stamp_path, part_prefix)
    verdict.notes["visible_tries"] = sorted(visible)
    current_try = int(current.removeprefix("try"))
    for number in sorted(visible - {current_try}):
        stale = outcomes.get(f"try{number}")
        if not cur.succeeded and cur.raised("PublishFenceError"):
            # The current try failed closed: Airflow shows a failed task, the operator looks.
            verdict.notes["stale_visible_current_failed_closed"] = number
        elif stale is not None and stale.raised("PublishRaceError") and stacked:
            pass  # the stacked merge, counted above
        else:
            verdict.violations.append(f"data of stale try {number} visible at HEAD")

    # 6. A current try that succeeded stands behind what the target shows.
    if cur.succeeded:
        output = cur.result["output_ref"]
        above = history.first_parent_chain(head, output)
        if above is None:
            verdict.violations.append(f"current try's output {output[:8]} is not on the target's history")
        else:
            for view in above:
                record = decode_metadata(view.metadata)
                if view.id in foreign_acked:
                    continue
                if view.id in stacked:
                    continue
                verdict.violations.append(f"commit {view.id[:8]} above the current try's output is unexplained")
        xcom = registry.visible_xcoms().get("output_ref")
        if xcom != output:
            pushers = [x["ti_id"] for x in registry.xcoms() if x["key"] == "output_ref"]
            if pushers and pushers[-1] != cur.ti_id:
                verdict.holes.append("stale_xcom_push")
            else:
                verdict.violations.append(f"visible XCom output_ref {xcom} is not the current try's {output}")
    elif cur.crashed or cur.error_type is None:
        verdict.violations.append(f"current try ended without a named error (rc {cur.returncode})")

    # 7. Only named outcomes: stale attempts stop with StaleAttemptError or fail closed; the current
    #    one succeeds or fails closed.
    for outcome in outcomes.values():
        if outcome.crashed and outcome.name != current:
            continue  # an injected crash
        if outcome.succeeded:
            continue
        allowed = CURRENT_ALLOWED if outcome.name == current else STALE_ALLOWED
        if not any(outcome.raised(name) for name in allowed):
            verdict.violations.append(
                f"{outcome.name} ended with {outcome.error_type or f'exit code {outcome.returncode}'}: "
                f"{outcome.result.get('message', '')[:300]}"
            )

    # 8. No staging branch left, except one kept as evidence by a fail-closed attempt.
    evidence = {o.result.get("staging_branch") for o in outcomes.values() if o.raised("PublishFenceError")}
    for name in leftover_staging(repo, key):
        if name not in evidence:
            verdict.violations.append(f"staging branch {name} left behind")

    # 9. The secret is in no attempt's log or outcome.
    if secret:
        for outcome in outcomes.values():
            if secret in outcome.log or secret in json.dumps(outcome.result):
                verdict.violations.append(f"the lakeFS secret appears in {outcome.name}'s log or outcome")
    return verdict


def check_cleaner(
    lake: Lake, repo: lakefs.Repository, key: PublicationKey, registry: AttemptRegistry, verdict: Verdict
) -> None:
    """Run the cleaner; no staging branch of a dead attempt may be left after it (evidence excepted)."""
    report = run_cleaner(lake, repo.id, registry)
    verdict.notes["cleaner_deleted"] = len(report["deleted"])
    evidence = {entry["branch"] for entry in report["kept"] if entry.get("evidence")}
    for name in leftover_staging(repo, key):
        if name not in evidence:
            verdict.violations.append(f"staging branch {name} left after the cleaner ran")


# -- racing scenarios -------------------------------------------------------------------------


@dataclass(frozen=True)
class RaceScenario:
    """One seeded interleaving: a zombie try 1, a clear, try 2, and a foreign writer.

    :param seed: the seed everything below derives from.
    :param clear_after: seconds after try 1 starts executing when the task is cleared (new try).
    :param try2_delay: seconds between the clear and try 2's process start.
    :param delays: per try (``"try1"``, ``"try2"``), seconds to sleep at each failpoint.
    :param foreign: seconds (after try 1 starts) of each foreign commit.
    :param foreign_style: ``commit`` or ``merge``.
    :param write_mode: ``workspace`` or ``direct``.
    :param output: ``stamp`` (same path on every try: outputs conflict), ``parts`` (per-attempt
        file names: outputs add up), or ``both``.
    """

    seed: int
    clear_after: float
    try2_delay: float
    delays: Mapping[str, Mapping[str, float]]
    foreign: tuple[float, ...]
    foreign_style: str
    write_mode: str
    output: str

    @classmethod
    def from_seed(cls, seed: int) -> RaceScenario:
        """Derive a scenario from ``seed`` (the same seed always gives the same scenario)."""
        rng = random.Random(seed)

        def delays(stall: bool) -> dict[str, float]:
            chosen = {p: round(rng.uniform(0.05, 1.5), 3) for p in POINTS if rng.random() < 0.25}
            if stall:  # one long pause (GC, I/O, a slow node): long enough for a whole other try
                chosen[rng.choice(POINTS)] = round(rng.uniform(2.0, 4.0), 3)
            return chosen

        return cls(
            seed=seed,
            clear_after=round(rng.uniform(0.0, 3.0), 3),
            try2_delay=round(rng.uniform(0.0, 0.5), 3),
            delays={"try1": delays(rng.random() < 0.3), "try2": delays(False)},
            foreign=tuple(sorted(round(rng.uniform(0.0, 6.0), 3) for _ in range(rng.choice([0, 0, 1, 2])))),
            foreign_style=rng.choice(["commit", "merge"]),
            write_mode=rng.choice(["workspace", "workspace", "direct"]),
            output=rng.choice(["stamp", "parts", "both"]),
        )

    def job(self) -> dict[str, Any]:
        """The race_job spec of this scenario."""
        job: dict[str, Any] = {"files": {"out/common.txt": "same on every try"}}
        if self.output in ("stamp", "both"):
            job["stamp_path"] = "out/stamp.txt"
        if self.output in ("parts", "both"):
            job["part_prefix"] = "out/parts/"
        return job


@dataclass
class RaceReport:
    """The result of one racing scenario."""

    scenario: RaceScenario
    verdict: Verdict
    outcomes: dict[str, dict[str, Any]]
    seconds: float

    def summary(self) -> dict[str, Any]:
        """A JSON-able summary."""
        return {
            "seed": self.scenario.seed,
            "ok": self.verdict.ok,
            "violations": self.verdict.violations,
            "holes": self.verdict.holes,
            "notes": self.verdict.notes,
            "outcomes": self.outcomes,
            "seconds": round(self.seconds, 1),
        }


def run_race(
    launcher: Launcher, lake: Lake, workdir: Path, home: Path, scenario: RaceScenario, *, fence: str = "soft"
) -> RaceReport:
    """Run one racing scenario end to end and check the invariants.

    :param fence: ``soft``, or ``hard``: the hard fence installed on the target before the input
        commit, the operator requiring it and replacing by merges (docs/hard-fence.md).
    """
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    repo, input_commit = new_repository(lake)
    if fence == "hard":
        adapter = LakeFSClient(lake.url, lake.access_key_id, lake.secret_access_key)
        input_commit = install_hard_fence(adapter, repo.id, TARGET).head
    registry = AttemptRegistry(workdir / "registry.sqlite")
    env = attempt_env(lake, home)
    key = PublicationKey(DAG_ID, f"race-{scenario.seed}", TASK_ID, -1)
    operator = {
        "repository": repo.id,
        "target_branch": TARGET,
        "input_ref": input_commit,
        "write_mode": scenario.write_mode,
        "output_prefixes": ["out/"],
    }
    if fence == "hard":
        operator.update(hard_fence="require", replace_by_merge=True)
    job = scenario.job()
    ti1 = registry.new_try(key.dag_id, key.run_id, key.task_id)
    first = spawn_attempt(launcher, workdir, env, registry, operator, job, ti_id=ti1, delays=scenario.delays["try1"])
    # Try 2's process starts now and waits for the clear, so its start-up does not decide the race.
    second = spawn_attempt(
        launcher,
        workdir,
        env,
        registry,
        operator,
        job,
        await_try=(key, 2, scenario.try2_delay),
        delays=scenario.delays["try2"],
    )
    foreign = None
    if scenario.foreign:
        foreign = spawn_foreign_writer(
            launcher, workdir, env, lake, registry, repo.id, schedule=scenario.foreign, style=scenario.foreign_style
        )
    try:
        t0 = registry.wait_for("try1", "start")
        time.sleep(max(0.0, t0 + scenario.clear_after - time.time()))
        registry.new_try(key.dag_id, key.run_id, key.task_id)  # the clear: try 1 is now a zombie
        outcomes = {"try1": first.wait(), "try2": second.wait()}
        if foreign is not None:
            foreign.wait(ATTEMPT_TIMEOUT)
    finally:
        for proc in (first.proc, second.proc, foreign):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(30)
    verdict = check_invariants(
        repo,
        key,
        input_commit,
        outcomes,
        registry,
        current="try2",
        stamp_path="out/stamp.txt" if scenario.output in ("stamp", "both") else None,
        part_prefix="out/parts/" if scenario.output in ("parts", "both") else None,
        secret=lake.secret_access_key,
        hard_resets=fence == "soft",
    )
    verdict.notes["fence"] = fence
    verdict.notes["foreign_failed"] = [e["detail"] for e in registry.events() if e["what"] == "foreign_failed"]
    check_cleaner(lake, repo, key, registry, verdict)
    summary = {
        name: {
            k: v
            for k, v in {
                "status": o.result.get("status", f"exit {o.returncode}"),
                "type": o.error_type,
                "message": (o.result.get("message") or "")[:240] or None,
            }.items()
            if v is not None
        }
        for name, o in outcomes.items()
    }
    summary["decisions"] = [  # type: ignore[assignment]
        f"{e['who']}:{e['detail']['action']}" for e in registry.events() if e["what"] == "decision"
    ]
    return RaceReport(scenario, verdict, summary, time.monotonic() - started)
