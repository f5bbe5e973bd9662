"""The fenced publish under the real Airflow scheduler, driven through the REST API as the UI would.

One full stack per module (api-server, scheduler with the LocalExecutor, dag-processor,
triggerer; the metadata database on PostgreSQL), the session's lakeFS, the fake spark-submit.
The task processes are real forks with heartbeats, so clearing or marking a running task instance makes the supervisor
SIGTERM it (``on_kill``) a few seconds later, exactly as in production.

The jobs (tests/stack/sched_job.py) drop a ``.started`` file in a signal directory as soon as
they run, so "mid-Spark" is an observed fact, not a guess from the clock.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, ROLE_STAGE, decode_metadata
from tests.stack.harness import AirflowStack, wait_for
from tests.stack.tier import (
    HeadRecorder,
    Signals,
    assert_linear_backfill,
    gone,
    history,
    read_text,
    record_of,
    run_backfill,
    scenario,
    staging_branches,
    task_processes,
    timestamp,
    xcom,
)
from tests.stack.tier import repository as tier_repository

pytestmark = pytest.mark.scheduler

#: The figures the tests measured, printed at the end of the module (docs/real-scheduler.md).
FIGURES: dict[str, float] = {}


@pytest.fixture(scope="module", autouse=True)
def _print_figures(airflow_stack: AirflowStack) -> Iterator[None]:
    FIGURES["db_migrate_s"] = airflow_stack.migrate_seconds
    FIGURES["boot_s"] = airflow_stack.boot_seconds
    yield
    print("\nreal-scheduler figures:", json.dumps({k: round(v, 2) for k, v in FIGURES.items()}))


def repository(lakefence_server: Any, name: str) -> lakefs.Repository:
    return tier_repository(lakefence_server.client(), name)


# -- 1. clear a running fenced task mid-Spark ---------------------------------------------------


def test_clear_mid_spark_only_the_new_try_publishes(
    airflow_stack: AirflowStack, lakefence_server: Any, tmp_path: Path
) -> None:
    """Clearing try 1 while its Spark job runs: try 1 never publishes, try 2 does, within 30 s of the clear."""
    api, dag_id, repo, base, signals = scenario(
        airflow_stack, "lf_sched_clear", repository(lakefence_server, "lf-sched-clear"), tmp_path
    )
    job = signals.job_spec(
        files={"tables/clear/part-0.txt": "rows"}, stamp_path="tables/clear/stamp.txt", sleep_by_try={"1": 600}
    )
    api.unpause(dag_id)
    with HeadRecorder(repo, "main") as heads:
        run_id = api.trigger(dag_id, {"job": job})
        first = signals.wait_started(timeout=120, **{"try": 1})
        ti1 = api.wait_ti(dag_id, run_id, "publish", {"running"}, timeout=10, try_number=1)

        cleared_at, cleared_mono = time.time(), time.monotonic()  # taken before: the delays err long
        api.clear(dag_id, run_id, "publish")
        # The supervisor's next heartbeat is refused; its SIGTERM reaches on_kill, which kills the job.
        wait_for("try 1's Spark job to be killed", lambda: gone(first["pid"]), 30)
        FIGURES["clear_to_spark_job_killed_s"] = time.monotonic() - cleared_mono
        wait_for("try 1's task process to end", lambda: not task_processes(ti1["id"]), 30)
        FIGURES["clear_to_task_process_end_s"] = time.monotonic() - cleared_mono

        ti2 = api.wait_ti(dag_id, run_id, "publish", {"running", "success", "failed"}, timeout=60, try_number=2)
        start_delay = timestamp(ti2["start_date"]) - cleared_at
        FIGURES["clear_to_new_try_start_s"] = start_delay
        assert start_delay < 30, f"try 2 started {start_delay:.1f}s after the clear"
        done = api.wait_ti(dag_id, run_id, "publish", {"success", "failed"}, timeout=120, try_number=2)
        assert done["state"] == "success", api.task_log(dag_id, run_id, "publish", 2)
        assert done["id"] != ti1["id"]  # a clear mints a new task-instance id

    assert not heads.errors
    head, record = record_of(repo, "main")
    # The only publication is try 2's merge of its own staged commit on top of the input.
    assert record is not None and record.role == ROLE_PUBLISH
    assert (record.attempt.try_number, record.attempt.ti_id, record.input_ref) == (2, done["id"], base)
    assert head.parents[0] == base
    _staged, staged_record = record_of(repo, head.parents[1])
    assert staged_record is not None and staged_record.role == ROLE_STAGE and staged_record.attempt.try_number == 2
    assert "-t2-" in read_text(repo, "main", "tables/clear/stamp.txt")
    # Try 1's output never reached the target: not as a HEAD at any moment, not in the history.
    assert heads.heads == [base, head.id]
    tries_in_history = {
        rec.attempt.try_number for c in history(repo, "main", False) if (rec := decode_metadata(c.metadata))
    }
    assert tries_in_history == {2}
    assert not signals.done(**{"try": 1}), "try 1's Spark job ran to completion"
    assert xcom(api, dag_id, run_id, "publish", "decision") == "merge"
    assert xcom(api, dag_id, run_id, "publish", "output_ref") == head.id
    assert staging_branches(repo) == []
    tries = api.tries(dag_id, run_id, "publish")
    assert [t["try_number"] for t in tries] == [1, 2]
    assert tries[1]["state"] == "success" and tries[0]["state"] != "success"


def test_clear_between_job_and_fence_the_fence_stops_it_and_the_new_try_starts_promptly(
    airflow_stack: AirflowStack, lakefence_server: Any, tmp_path: Path
) -> None:
    """Try 1 is cleared after its job, before attempt fence #1 (conf ``after_job``), before the kill.

    The fence sees the cleared attempt first and waits (``stale_grace_period``) for the supervisor's
    kill instead of failing at once, so the restarting task instance is not sent to up_for_retry
    (300 s retry delay): try 2 starts within 30 s and is the only one to publish.
    """
    api, dag_id, repo, base, signals = scenario(
        airflow_stack, "lf_sched_clear", repository(lakefence_server, "lf-sched-clear"), tmp_path
    )
    job = signals.job_spec(files={"tables/clear/part-0.txt": "rows again"}, stamp_path="tables/clear/stamp.txt")
    api.unpause(dag_id)
    with HeadRecorder(repo, "main") as heads:
        run_id = api.trigger(dag_id, {"job": job, "after_job": {"publish": "clear"}})
        ti2 = api.wait_ti(dag_id, run_id, "publish", {"running", "success", "failed"}, timeout=120, try_number=2)
        done = api.wait_ti(dag_id, run_id, "publish", {"success", "failed"}, timeout=120, try_number=2)
        assert done["state"] == "success", api.task_log(dag_id, run_id, "publish", 2)
    # The job's end bounds the clear from below: the task cleared itself right after it.
    (job_1,) = signals.done(**{"try": 1})
    start_delay = timestamp(ti2["start_date"]) - job_1["time"]
    FIGURES["clear_at_fence_to_new_try_start_s"] = start_delay
    assert start_delay < 30, f"try 2 started {start_delay:.1f}s after try 1's job ended"
    log_1 = api.task_log(dag_id, run_id, "publish", 1)
    assert "stale attempt before stage" in log_1, log_1[-3000:]
    head, record = record_of(repo, "main")
    assert record is not None and record.role == ROLE_PUBLISH
    assert (record.attempt.try_number, record.attempt.ti_id, record.input_ref) == (2, done["id"], base)
    assert heads.heads == [base, head.id] and not heads.errors
    assert "-t2-" in read_text(repo, "main", "tables/clear/stamp.txt")
    assert staging_branches(repo) == []


def test_control_without_the_grace_period_the_cleared_task_waits_for_the_retry_delay(
    airflow_stack: AirflowStack, lakefence_server: Any, tmp_path: Path
) -> None:
    """The control of the test above: with ``stale_grace_period=0`` the stale try raises before the kill.

    Airflow then treats the restarting task instance as a failed try: up_for_retry, and the next
    try would wait for the task's retry_delay (300 s by default) instead of starting in seconds.
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


# -- 2. mark failed / mark success mid-run -------------------------------------------------------


def test_marked_failed_and_marked_success_mid_run_publish_nothing(
    airflow_stack: AirflowStack, lakefence_server: Any, tmp_path: Path
) -> None:
    """Running tries marked failed or success stop without publishing, and the marks stand.

    ``publish_mark_failed`` and ``publish_mark_success`` are marked by the test while their Spark
    jobs run: the supervisor's kill (on_kill) stops them. ``publish_mark_at_fence`` marks itself
    success through the API right after its job (conf ``after_job``), before the supervisor's next
    heartbeat: attempt fence #1 must see that the state is no longer ``running``.
    """
    api, dag_id = airflow_stack.api, "lf_sched_mark"
    assert api is not None
    repo = repository(lakefence_server, "lf-sched-mark")
    targets = {
        "publish_mark_failed": "mark-failed",
        "publish_mark_success": "mark-success",
        "publish_mark_at_fence": "mark-at-fence",
    }
    by_test = {"publish_mark_failed": "failed", "publish_mark_success": "success"}
    bases = {target: repo.branch(target).get_commit().id for target in targets.values()}
    signals = Signals(tmp_path)
    job = signals.job_spec(
        files={"tables/mark/part-0.txt": "rows"},
        stamp_path="tables/mark/stamp.txt",
        sleep_by_try={"1": 600},
        sleep_by_target={"mark-at-fence": 0},
    )
    api.unpause(dag_id)
    with contextlib.ExitStack() as recorders:
        heads = {target: recorders.enter_context(HeadRecorder(repo, target)) for target in targets.values()}
        run_id = api.trigger(dag_id, {"job": job, "after_job": {"publish_mark_at_fence": "success"}})
        jobs = {task: signals.wait_started(timeout=120, target=targets[task]) for task in by_test}
        tis = {task: api.wait_ti(dag_id, run_id, task, {"running"}, timeout=10, try_number=1) for task in by_test}

        marked_mono = time.monotonic()
        for task, state in by_test.items():
            api.mark(dag_id, run_id, task, state)
        for task in by_test:
            wait_for(f"{task}'s Spark job to be killed", lambda task=task: gone(jobs[task]["pid"]), 30)
            FIGURES[f"mark_{by_test[task]}_to_spark_job_killed_s"] = time.monotonic() - marked_mono
        for task in by_test:
            wait_for(f"{task}'s task process to end", lambda task=task: not task_processes(tis[task]["id"]), 30)
        FIGURES["mark_to_task_processes_end_s"] = time.monotonic() - marked_mono

        at_fence = api.wait_ti(dag_id, run_id, "publish_mark_at_fence", {"success", "failed"}, timeout=120)
        wait_for("publish_mark_at_fence's task process to end", lambda: not task_processes(at_fence["id"]), 30)

    for task, state in {**by_test, "publish_mark_at_fence": "success"}.items():
        ti = api.task_instance(dag_id, run_id, task)
        # The stale process's own ending did not overwrite the mark, nor start a new try.
        assert (ti["state"], ti["try_number"]) == (state, 1), task
    for target, recorder in heads.items():
        assert not recorder.errors
        assert recorder.heads == [bases[target]], f"{target} moved: {recorder.heads}"
        assert repo.branch(target).get_commit().id == bases[target]
    assert [d["target"] for d in signals.done()] == ["mark-at-fence"], "a try marked mid-Spark finished its job"
    # The stale attempts dropped their staging branches on the way out (nothing for the cleaner).
    wait_for("the stale attempts' staging branches to be removed", lambda: staging_branches(repo) == [], 15)
    for task in by_test:
        log = api.task_log(dag_id, run_id, task, 1)
        assert "StaleAttemptError" in log and "on_kill" in log, log[-3000:]
    log = api.task_log(dag_id, run_id, "publish_mark_at_fence", 1)
    assert "stale attempt before stage" in log, log[-3000:]
    # The fence's own reason. (Should the supervisor's heartbeat fall into the few milliseconds
    # between the mark and the check, the reason would be on_kill instead: about 1 run in 100.)
    fence_saw_state = "task instance state is 'success', not running" in log
    FIGURES["mark_at_fence_reason_was_state"] = float(fence_saw_state)
    assert fence_saw_state or "on_kill was received" in log, log[-3000:]


# -- 3. fail right after publishing, automatic retry ---------------------------------------------


def test_retry_after_publishing_replaces_the_publication(
    airflow_stack: AirflowStack, lakefence_server: Any, tmp_path: Path
) -> None:
    """Try 1 dies right after its merge (``after_verify=exit``); Airflow retries; try 2 replaces the merge."""
    api, dag_id, repo, base, signals = scenario(
        airflow_stack, "lf_sched_retry", repository(lakefence_server, "lf-sched-retry"), tmp_path
    )
    job = signals.job_spec(files={"tables/retry/part-0.txt": "rows"}, stamp_path="tables/retry/stamp.txt")
    api.unpause(dag_id)
    with HeadRecorder(repo, "main") as heads:
        run_id = api.trigger(dag_id, {"job": job})
        run = api.wait_run(dag_id, run_id, {"success", "failed"}, timeout=180)
    assert run["state"] == "success", api.task_log(dag_id, run_id, "publish", 2)

    tries = api.tries(dag_id, run_id, "publish")
    assert [(t["try_number"], t["state"]) for t in tries] == [(1, "failed"), (2, "success")]
    assert not heads.errors
    # What the target showed: the input, try 1's merge, then try 2's staged commit.
    assert len(heads.heads) == 3 and heads.heads[0] == base, heads.heads
    merge_1, record_1 = record_of(repo, heads.heads[1])
    assert record_1 is not None and (record_1.role, record_1.attempt.try_number) == (ROLE_PUBLISH, 1)
    assert merge_1.parents[0] == base
    head, record_2 = record_of(repo, "main")
    assert head.id == heads.heads[2]
    assert record_2 is not None and (record_2.role, record_2.attempt.try_number) == (ROLE_STAGE, 2)
    assert list(head.parents) == [base]
    assert [c.id for c in history(repo, "main", True)] == [head.id, base]
    assert merge_1.id not in {c.id for c in history(repo, "main", False)}
    assert "-t2-" in read_text(repo, "main", "tables/retry/stamp.txt")
    assert xcom(api, dag_id, run_id, "publish", "decision") == "replace"
    assert xcom(api, dag_id, run_id, "publish", "output_ref") == head.id
    assert staging_branches(repo) == []


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
