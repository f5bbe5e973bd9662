"""The durable tier under the real scheduler: the stack of tests/stack, the cluster of
tests/durable/cluster.py, and a worker killed (or frozen) mid-job. Shared by
tests/durable/test_adoption_scheduler.py and benchmarks/durable_adoption.py.

"The worker running the task" is the LocalExecutor's worker process (it supervises the task) and
the task process it forked, with their children: SIGKILL them all and the try dies
with no ``finally`` and no ``on_kill``, as when its machine goes away; the scheduler finds the
missing heartbeats after ``task_instance_heartbeat_timeout`` (10 s here) and schedules the retry.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from airflow_lakefence.core.names.keys import PublicationKey
from airflow_lakefence.lakefs_adapter.run_state_store import read_run_state
from tests.durable.cluster import DurableCluster, job_runs

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DAG_FILE = HERE / "dags" / "durable_dags.py"
DAG_IDS = ("lf_durable", "lf_not_durable")
#: The stack's settings: a dead worker's try is failed (and retried) within seconds, and the
#: components import this worktree's package.
STACK_CONFIG = {
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "10",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
    "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
}


def worker_processes(stack: Any, ti_id: str) -> list[psutil.Process]:
    """The executor's worker running ``ti_id`` (titled ``airflow worker -- LocalExecutor: <ti id>``; it
    supervises the task) and everything below it: the task process and whatever it started.

    Found among the scheduler's descendants by title (the titles overwrite the processes' environment,
    so the stack's marker cannot find them).
    """
    scheduler = psutil.Process(stack.processes["scheduler"].pid)
    for proc in scheduler.children(recursive=True):
        try:
            if ti_id in " ".join(proc.cmdline()):
                return [proc, *proc.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    raise LookupError(f"no worker runs task instance {ti_id}")


@dataclass
class Outcome:
    """One run with a worker killed (or frozen) mid-job.

    :param run_id: the DAG run.
    :param state: its final state.
    :param wall: seconds from the trigger to the run's end.
    :param killed_at: seconds from the trigger to the kill.
    :param tries: the task's try number at the end.
    :param drivers: the drivers the master ran for this run (id, state).
    :param runs: the job's own log: ``(event, epoch)``.
    """

    run_id: str
    state: str
    wall: float
    killed_at: float
    tries: int
    drivers: list[tuple[str, str]] = field(default_factory=list)
    runs: list[tuple[str, float]] = field(default_factory=list)

    @property
    def job_seconds(self) -> float:
        """Driver-seconds the cluster spent: each job from its start to its end (done or fail)."""
        total, started = 0.0, []
        for event, at in self.runs:
            if event == "start":
                started.append(at)
            elif started:
                total += at - started.pop(0)
        return total


def run_with_a_dead_worker(
    stack: Any,
    cluster: DurableCluster,
    dag_id: str,
    conf: dict[str, Any],
    *,
    kill_after: float,
    lakefs_client: Any,
    freeze: bool = False,
    after_kill: Callable[[dict[str, Any]], None] | None = None,
    timeout: float = 300,
) -> Outcome:
    """Trigger ``dag_id``, kill the worker ``kill_after`` seconds into the job, wait for the run's end.

    :param conf: the run's conf (repository, input_ref, jar, seconds, runs_log...).
    :param kill_after: seconds after the job's start (its own log) to kill at, and not before the
        try recorded its job (a kill inside the submission itself is the crash window the protocol
        answers with a new job: not what is measured here).
    :param lakefs_client: a :class:`~airflow_lakefence.lakefs_adapter.client.LakeFSClient` (reads the run state).
    :param freeze: SIGSTOP the worker instead (a zombie): :func:`thaw` it later.
    :param after_kill: called with the run's ids right after the kill (e.g. to thaw a zombie).
    """
    api = stack.api
    before = {d["id"] for d in cluster.drivers()}
    started = time.monotonic()
    run_id = api.trigger(dag_id, conf)
    ti = api.wait_ti(dag_id, run_id, "publish", ["running"], 120)
    runs_log = Path(conf["runs_log"])
    deadline = time.monotonic() + 120
    while not any(event == "start" for event, _ in job_runs(runs_log)):
        if time.monotonic() > deadline:
            raise TimeoutError("the job did not start")
        time.sleep(0.2)
    job_start = next(at for event, at in job_runs(runs_log) if event == "start")
    key = PublicationKey(dag_id, run_id, "publish")
    while not any(k.startswith("job/") for k in read_run_state(lakefs_client, conf["repository"], key)):
        if time.monotonic() > deadline:
            raise TimeoutError("the try did not record its job")
        time.sleep(0.2)
    time.sleep(max(0.0, job_start + kill_after - time.time()))
    procs = worker_processes(stack, ti["id"])
    for proc in procs:
        proc.send_signal(signal.SIGSTOP if freeze else signal.SIGKILL)
    killed_at = time.monotonic() - started
    if after_kill is not None:
        after_kill({"dag_id": dag_id, "run_id": run_id, "ti_id": ti["id"]})
    run = api.wait_run(dag_id, run_id, ["success", "failed"], timeout)
    wall = time.monotonic() - started
    final = api.task_instance(dag_id, run_id, "publish")
    drivers = [(d["id"], d["state"]) for d in cluster.drivers() if d["id"] not in before]
    outcome = Outcome(run_id, run["state"], wall, killed_at, int(final["try_number"]), sorted(drivers))
    outcome.runs = job_runs(runs_log)
    return outcome


def thaw(stack: Any, ti_id: str) -> None:
    """SIGCONT a frozen worker (its try is stale by now: a zombie coming back)."""
    for proc in worker_processes(stack, ti_id):
        proc.send_signal(signal.SIGCONT)


def master_drivers(cluster: DurableCluster) -> list[dict[str, Any]]:
    """The master's driver list (for the benchmark's report)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.ui_port}/json/", timeout=10) as answer:
        state = json.load(answer)
    return [*state.get("activedrivers", []), *state.get("completeddrivers", [])]
