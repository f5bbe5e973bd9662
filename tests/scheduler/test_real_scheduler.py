"""The fenced publish under the real Airflow scheduler, driven through the REST API as the UI would.

One full stack per module (api-server, scheduler with the LocalExecutor, dag-processor,
triggerer; the metadata database on PostgreSQL), the session's lakeFS, the fake spark-submit.
The task processes are real forks with heartbeats, so clearing or marking a running task instance makes the supervisor
SIGTERM it (``on_kill``) a few seconds later, exactly as in production.

The scenarios every executor runs (a cleared try, marked tries, a try that dies after publishing)
are written once in tests/stack/scenarios.py; this module runs them under the LocalExecutor
(:class:`TestLocalExecutorScenarios`, the ``executor`` fixture in tests/scheduler/conftest.py), and
adds what only this tier shows: the grace period's control and the backfill through a 1-slot pool.

The jobs (tests/stack/sched_job.py) drop a ``.started`` file in a signal directory as soon as
they run, so "mid-Spark" is an observed fact, not a guess from the clock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lakefs
import pytest

from tests.stack.airflow_stack import AirflowStack
from tests.stack.scenarios import ExecutorScenarios
from tests.stack.tier import HeadRecorder, Signals, assert_linear_backfill, run_backfill, scenario
from tests.stack.tier import repository as tier_repository

pytestmark = pytest.mark.scheduler

#: The figures the tests measured, printed at the end of the module (docs/real-scheduler.md).
FIGURES: dict[str, Any] = {}


@pytest.fixture(scope="module", autouse=True)
def _print_figures(airflow_stack: AirflowStack) -> Iterator[None]:
    FIGURES["db_migrate_s"] = airflow_stack.migrate_seconds
    FIGURES["boot_s"] = airflow_stack.boot_seconds
    yield
    shown = {k: round(v, 2) if isinstance(v, float) else v for k, v in FIGURES.items()}
    print("\nreal-scheduler figures:", json.dumps(shown))


def repository(lakefence_server: Any, name: str) -> lakefs.Repository:
    return tier_repository(lakefence_server.client(), name)


# -- the scenarios every executor runs (tests/stack/scenarios.py) -------------------------------


class TestLocalExecutorScenarios(ExecutorScenarios):
    """A cleared try, marked tries, a try that dies after publishing: under the LocalExecutor."""


# -- the grace period's control ------------------------------------------------------------------


def test_control_without_the_grace_period_the_cleared_task_waits_for_the_retry_delay(
    airflow_stack: AirflowStack, lakefence_server: Any, tmp_path: Path
) -> None:
    """The grace period's control: with ``stale_grace_period=0`` the stale try raises before the kill.

    Airflow then treats the restarting task instance as a failed try: up_for_retry, and the next
    try would wait for the task's retry_delay (300 s by default) instead of starting in seconds, as
    it does after try 1 cleared after its job in tests/stack/scenarios.py (which waits for the kill).
    """
    api, dag_id = airflow_stack.api, "lf_sched_clear_no_grace"
    assert api is not None
    repo = repository(lakefence_server, "lf-sched-clear")
    base = repo.branch("no-grace").get_commit().id
    task = api.request("GET", f"/dags/{dag_id}/tasks/publish")
    assert task["retry_delay"]["days"] == 0 and task["retry_delay"]["seconds"] == 300, task["retry_delay"]
    signals = Signals(tmp_path)
    job = signals.job_spec(files={"tables/clear/part-0.txt": "rows"})
    api.unpause(dag_id)
    run_id = api.trigger(dag_id, {"job": job, "after_job": {"publish": "clear"}})
    ti = api.wait_ti(dag_id, run_id, "publish", {"up_for_retry", "running", "success", "failed"}, timeout=120)
    ti = api.wait_ti(dag_id, run_id, "publish", {"up_for_retry", "success", "failed"}, timeout=60)
    log_1 = api.task_log(dag_id, run_id, "publish", 1)
    if "on_kill was received" in log_1:
        # The supervisor's heartbeat fell into the milliseconds between the clear and the check.
        pytest.skip("the supervisor's kill came first: nothing to control this time")
    # 3.3: the cleared id is archived; 3.0 to 3.2 keep the id until the next try and say "restarting".
    assert "no longer live" in log_1 or "task instance state is 'restarting'" in log_1, log_1[-3000:]
    assert (ti["state"], ti["try_number"]) == ("up_for_retry", 1)
    assert repo.branch("no-grace").get_commit().id == base
    api.mark(dag_id, run_id, "publish", "failed")  # no try 2 five minutes from now


# -- 4. backfill of 5 logical dates onto one target ----------------------------------------------


def test_backfill_publishes_once_per_run_in_logical_date_order(
    airflow_stack: AirflowStack, lakefence_server: Any, tmp_path: Path
) -> None:
    """A 5-date backfill through the 1-slot pool: linear history, one publication per run, in date order."""
    api, dag_id, repo, base, signals = scenario(
        airflow_stack, "lf_sched_backfill", repository(lakefence_server, "lf-sched-backfill"), tmp_path
    )
    job = signals.job_spec(files={"tables/daily/part-0.txt": "rows"}, stamp_path="tables/daily/stamp.txt")
    started = time.monotonic()
    with HeadRecorder(repo, "main") as heads:
        runs = run_backfill(api, dag_id, job)
    FIGURES["backfill_5_runs_s"] = time.monotonic() - started
    # Linear: the input and five merges, one per run in logical-date order, each on the previous one;
    # through the 1-slot pool the fenced tries never overlapped.
    assert_linear_backfill(api, repo, dag_id, runs, base, heads)
