"""Fixtures of the Celery tier: one real lakeFS and one Celery stack per session, figures in the summary.

The stack (Redis, api-server, scheduler with CeleryExecutor, dag-processor, triggerer, two Celery
workers) boots once for the tier's modules (package-scoped fixtures); each scenario uses a DAG and
target branches of its own (tests/dags/celery_dags.py). lakeFS is the tier's own real lakeFS
(:class:`tests.tools.real_lakefs.RealLakeFS`), not the session's shared one, because a
scenario restarts it. The tier needs ``redis-server`` (Debian package) and the lakeFS binary (built
from tests/real_lakefs); without them it is skipped, or fails when ``CI`` is set.
"""

from __future__ import annotations

import json
import os
import secrets
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.records.metadata import ROLE_PUBLISH
from tests.dags.celery_dags import TARGETS, held_name
from tests.stack import tier
from tests.stack.airflow_stack import wait_for
from tests.stack.celery import CeleryStack, redis_server_binary, settings_summary
from tests.stack.scenarios import Executor
from tests.stack.tier import HeadRecorder, Signals, record_of, timestamp, xcom
from tests.tools.real_lakefs import GoToolchainMissingError, RealLakeFS, ensure_lakefs_binary

DAG_FILE = Path(__file__).resolve().parent.parent / "dags" / "celery_dags.py"
#: The settings that bound the stale window, as the tier runs them (docs/howto/executors.md).
STACK_SETTINGS = {
    # A worker that died is noticed after this many seconds without a heartbeat (default 300).
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
    # The supervisor's heartbeat, which also delivers clears and marks as a kill (the default).
    "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "5",
    # A task a killed worker had taken but not yet started stays "queued", where no heartbeat
    # timeout applies: the scheduler re-queues it after this many seconds (default 600, longer than
    # the scenarios wait).
    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "180",
}

#: Figures the scenarios measured (not asserted), printed in the terminal summary by tests/conftest.py.
FIGURES: dict[str, Any] = {}


pytest_runtest_makereport, _dump_logs_on_failure = tier.stack_tier_hooks(
    "Celery tier", lambda item: FIGURES, "celery_stack", session_wide=True
)


def _unavailable(message: str) -> None:
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(f"the Celery tier is mandatory on CI: {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="package")
def real_lakefs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealLakeFS]:
    """A real lakeFS of the tier's own (a scenario restarts it), with credentials made up for the session."""
    try:
        binary = ensure_lakefs_binary()
    except GoToolchainMissingError as exc:
        _unavailable(f"real lakeFS unavailable: {exc}")
    alphabet = string.ascii_uppercase + string.digits
    server = RealLakeFS(
        binary,
        tmp_path_factory.mktemp("celery-lakefs"),
        access_key_id="AKIALF" + "".join(secrets.choice(alphabet) for _ in range(14)),
        secret_access_key=secrets.token_urlsafe(30),
        log_level="WARN",
    )
    with server:
        yield server


def celery_executor_problem() -> str | None:
    """Why Airflow cannot load the CeleryExecutor here (in a clean process), or ``None`` if it can.

    E.g. the Celery provider is missing, or Celery 5.7 with provider 3.26 (``cannot import name 'retry'``).
    """
    with tempfile.TemporaryDirectory(prefix="lakefence-celery-check-") as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        probe = subprocess.run(
            [sys.executable, "-c", "import airflow.providers.celery.executors.celery_executor"],
            env={**env, "AIRFLOW_HOME": home},
            capture_output=True,
            text=True,
            check=False,
        )
    if probe.returncode == 0:
        return None
    lines = probe.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit code {probe.returncode}"


@pytest.fixture(scope="package")
def celery_stack(real_lakefs: RealLakeFS, request: pytest.FixtureRequest) -> Iterator[CeleryStack]:
    """The stack with the tier's DAGs parsed, both workers answering, connections and pools created."""
    if redis_server_binary() is None:
        _unavailable("redis-server is not installed (apt-get install -y redis-server)")
    problem = celery_executor_problem()
    if problem:
        _unavailable(f"the CeleryExecutor does not load: {problem}")
    client = lakefs.Client(host=real_lakefs.url, username=real_lakefs.access_key_id,
                           password=real_lakefs.secret_access_key)
    tier.create_repositories(client, "local://lakefence-celery", TARGETS)
    stack = CeleryStack(
        dag_files=[DAG_FILE],
        connections=tier.lakefs_connection(
            real_lakefs.endpoint, real_lakefs.access_key_id, real_lakefs.secret_access_key
        ),
        pools=tier.one_slot_pools(TARGETS),
        extra_config=STACK_SETTINGS,
    )
    booting = time.monotonic()
    with tier.running_stack(stack, [*TARGETS, "lf_cel_watch"], lambda: request.session.stash.get(tier.FAILED, False)):
        FIGURES["stack_boot_s"] = time.monotonic() - booting
        FIGURES["db_migrate_s"] = stack.migrate_seconds
        FIGURES["components_healthy_s"] = stack.boot_seconds
        FIGURES["workers_ready_s"] = stack.workers_ready_seconds
        FIGURES["settings"] = settings_summary(stack.environment())
        yield stack


def wait_held(signals: Signals, task_id: str, try_number: int, point: str, timeout: float) -> dict[str, Any]:
    """Wait until a try stopped at ``point`` (tests/dags/celery_dags.py) and return what it wrote."""
    path = signals.directory / f"{held_name(task_id, try_number, point)}.held"
    wait_for(f"{task_id} try {try_number} to hold at {point}", path.exists, timeout)
    return dict(json.loads(path.read_text()))


def release(signals: Signals, task_id: str, try_number: int, point: str) -> None:
    """Let a held try go on."""
    (signals.directory / f"{held_name(task_id, try_number, point)}.go").touch()


def repository(server: RealLakeFS, name: str) -> lakefs.Repository:
    """A repository on the tier's lakeFS."""
    client = lakefs.Client(host=server.url, username=server.access_key_id, password=server.secret_access_key)
    return tier.repository(client, name)


class CeleryExecutor(Executor):
    """The shared scenarios (tests/stack/scenarios.py) under the CeleryExecutor on two workers.

    Each try must have run on one of the workers, and its log is read from that worker's disk. The
    tier acts from outside at a point a try reached and holds at (``dag_run.conf["hold"]``), and
    kills a whole worker where the LocalExecutor's try exits by itself.

    :param lakefs_server: the tier's real lakeFS.
    """

    # Try 2's job of the retry scenario takes a few seconds: the window in which the abandoned-
    # publication sensor sees try 1's merge as HEAD.
    retry_job_sleep = 5.0

    def __init__(
        self,
        stack: CeleryStack,
        figures: dict[str, Any],
        dags: Mapping[str, tuple[str, str]],
        lakefs_server: RealLakeFS,
    ) -> None:
        super().__init__(stack, figures, dags)
        self.celery = stack
        self.server = lakefs_server
        self._killed: dict[str, Any] = {}

    def repository(self, name: str) -> lakefs.Repository:
        return repository(self.server, name)

    def check_worker(self, ti: Mapping[str, Any]) -> None:
        assert ti["hostname"] in self.celery.worker_names, ti

    def log(self, dag_id: str, run_id: str, task_id: str, try_number: int, ran_on: str | None = None) -> str:
        # The try's log is on the disk of the worker that ran it, and only there.
        where, text = self.celery.task_log(dag_id, run_id, task_id, try_number)
        assert ran_on is None or where == ran_on, (where, ran_on)
        return text

    def trigger_cleared_after_job(self, dag_id: str, conf: dict[str, Any], signals: Signals) -> str:
        # Try 1 holds after its job, before attempt fence #1; it is cleared from outside and let go
        # at once, before the supervisor's next heartbeat (every 5 s) can deliver the kill.
        run_id = self.api.trigger(dag_id, {**conf, "hold": {"publish": {"point": "after_job", "tries": [1]}}})
        held = wait_held(signals, "publish", 1, "after_job", timeout=120)
        ti1 = self.api.task_instance(dag_id, run_id, "publish")
        assert (ti1["state"], ti1["try_number"], ti1["hostname"]) == ("running", 1, held["worker"]), ti1
        self.api.clear(dag_id, run_id, "publish")
        release(signals, "publish", 1, "after_job")
        return run_id

    def kill_after_publishing(
        self, dag_id: str, conf: dict[str, Any], signals: Signals, heads: HeadRecorder
    ) -> tuple[str, dict[str, Any]]:
        """SIGKILL of try 1's whole worker after its merge (held at ``after_verify``).

        The scheduler notices the missing heartbeats ([scheduler] task_instance_heartbeat_timeout)
        and fails try 1; the retry runs on the surviving worker. The abandoned-publication sensor
        (``lf_cel_watch``), started after the kill, runs next to it.
        """
        api, figures = self.api, self.figures
        api.unpause("lf_cel_watch")
        run_id = api.trigger(dag_id, {**conf, "hold": {"publish": {"point": "after_verify", "tries": [1]}}})
        held = wait_held(signals, "publish", 1, "after_verify", timeout=120)
        ti1 = api.task_instance(dag_id, run_id, "publish")
        victim = ti1["hostname"]
        assert (ti1["state"], ti1["try_number"], held["worker"]) == ("running", 1, victim)
        merge_1, record_1 = record_of(self.repository(self.dags["retry"][1]), "main")
        assert record_1 is not None and (record_1.role, record_1.attempt.try_number) == (ROLE_PUBLISH, 1)
        survivor = next(name for name in self.celery.worker_names if name != victim)

        killed_at, killed_mono = time.time(), time.monotonic()
        try:
            figures["worker_kill_processes"] = self.celery.kill_worker(victim)
            watch_run = api.trigger("lf_cel_watch")
            failed = api.wait_ti(dag_id, run_id, "publish", {"up_for_retry", "failed"}, timeout=180)
            figures["worker_death_to_try_failed_s"] = time.monotonic() - killed_mono
            assert (failed["state"], failed["try_number"]) == ("up_for_retry", 1), failed
            ti2 = api.wait_ti(dag_id, run_id, "publish", {"running", "success", "failed"}, timeout=60, try_number=2)
            figures["worker_death_to_next_try_start_s"] = timestamp(ti2["start_date"]) - killed_at
            done = api.wait_ti(dag_id, run_id, "publish", {"success", "failed"}, timeout=120, try_number=2)
            figures["worker_death_to_replacement_s"] = timestamp(done["end_date"]) - killed_at
            watch = api.wait_run("lf_cel_watch", watch_run, {"success", "failed"}, timeout=120)
        finally:
            self.celery.start_worker(victim)  # the later scenarios want two workers again
        assert watch["state"] == "success"
        self._killed = {"victim": victim, "survivor": survivor, "watch_run": watch_run, "merge_1": merge_1.id}
        return run_id, done

    def check_replacement(self, run_id: str, tries: list[dict[str, Any]], merge_1: Any) -> None:
        """Try 1 ran on the killed worker, try 2 on the other; the sensor reported try 1's merge abandoned."""
        victim, survivor, watch_run = self._killed["victim"], self._killed["survivor"], self._killed["watch_run"]
        assert merge_1.id == self._killed["merge_1"]
        assert [(t["try_number"], t["state"], t["hostname"]) for t in tries] == [
            (1, "failed", victim),
            (2, "success", survivor),
        ]
        # The alert: HEAD was try 1's merge, abandoned (Airflow already repairing it).
        verdict = xcom(self.api, "lf_cel_watch", watch_run, "detect_abandoned", "return_value")
        assert (verdict["verdict"], verdict["head"], verdict["try_number"]) == ("abandoned", merge_1.id, 1), verdict
        assert verdict["retry_pending"] or verdict["replacement_running"], verdict
        self.figures["abandoned_sensor_verdict"] = {
            k: verdict[k] for k in ("state", "retry_pending", "replacement_running")
        }
        watch_worker = self.api.task_instance("lf_cel_watch", watch_run, "detect_abandoned")["hostname"]
        assert watch_worker == survivor


#: The shared scenarios' DAGs and repositories in tests/dags/celery_dags.py.
SCENARIO_DAGS = {
    "clear": ("lf_cel_clear", "lf-cel-clear"),
    "mark": ("lf_cel_mark", "lf-cel-mark"),
    "retry": ("lf_cel_kill", "lf-cel-kill"),
}


@pytest.fixture
def executor(celery_stack: CeleryStack, real_lakefs: RealLakeFS) -> CeleryExecutor:
    """The shared scenarios' view of this tier; the figures go to the tier's ``FIGURES``."""
    return CeleryExecutor(celery_stack, FIGURES, SCENARIO_DAGS, real_lakefs)
