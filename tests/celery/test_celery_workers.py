"""The fences under the CeleryExecutor with two workers, against a real lakeFS.

One stack per session (tests/celery/conftest.py): Redis, api-server, scheduler (CeleryExecutor),
dag-processor, triggerer (the metadata database on PostgreSQL) and two Celery workers with
separate homes, all on loopback, driven through the REST API as the UI would. Each scenario has
a DAG and target of its own (tests/dags/celery_dags.py) and asserts the target branch (HEAD,
parents, objects, the lakefence record of each commit) and the task history (try numbers,
states, the worker of each try: the task instance's ``hostname``). The figures it measures are
printed in the terminal summary.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, ROLE_STAGE, decode_metadata
from tests.celery.conftest import FIGURES
from tests.dags.celery_dags import RESTART_POINTS, held_name
from tests.stack.celery import CeleryStack
from tests.stack.harness import wait_for
from tests.stack.tier import (
    HeadRecorder,
    Signals,
    assert_linear_backfill,
    gone,
    history,
    publications,
    read_text,
    record_of,
    run_backfill,
    scenario,
    staging_branches,
    timestamp,
    wait_task_process_end,
    xcom,
)
from tests.stack.tier import repository as tier_repository
from tests.tools.real_lakefs import RealLakeFS

pytestmark = [pytest.mark.celery, pytest.mark.real_lakefs]


def repository(server: RealLakeFS, name: str) -> lakefs.Repository:
    client = lakefs.Client(host=server.url, username=server.access_key_id, password=server.secret_access_key)
    return tier_repository(client, name)


def wait_held(signals: Signals, task_id: str, try_number: int, point: str, timeout: float) -> dict[str, Any]:
    """Wait until a try stopped at ``point`` (tests/dags/celery_dags.py) and return what it wrote."""
    path = signals.directory / f"{held_name(task_id, try_number, point)}.held"
    wait_for(f"{task_id} try {try_number} to hold at {point}", path.exists, timeout)
    return dict(json.loads(path.read_text()))


def release(signals: Signals, task_id: str, try_number: int, point: str) -> None:
    (signals.directory / f"{held_name(task_id, try_number, point)}.go").touch()


# -- 1. clear a running fenced task --------------------------------------------------------------


def test_clear_running_try_the_stale_worker_never_publishes(
    celery_stack: CeleryStack, real_lakefs: RealLakeFS, tmp_path: Path
) -> None:
    """Try 1 is cleared while its job runs on one worker: it never publishes; try 2 (any worker) merges."""
    api, dag_id, repo, base, signals = scenario(
        celery_stack, "lf_cel_clear", repository(real_lakefs, "lf-cel-clear"), tmp_path
    )
    job = signals.job_spec(
        files={"tables/clear/part-0.txt": "rows"}, stamp_path="tables/clear/stamp.txt", sleep_by_try={"1": 600}
    )
    api.unpause(dag_id)
    with HeadRecorder(repo, "main") as heads:
        run_id = api.trigger(dag_id, {"job": job})
        first = signals.wait_started(timeout=120, **{"try": 1})
        ti1 = api.wait_ti(dag_id, run_id, "publish", {"running"}, timeout=30, try_number=1)
        worker_1 = ti1["hostname"]
        assert worker_1 in celery_stack.worker_names, ti1

        cleared_at, cleared_mono = time.time(), time.monotonic()
        api.clear(dag_id, run_id, "publish")
        wait_for("try 1's Spark job to be killed", lambda: gone(first["pid"]), 30)
        FIGURES["clear_to_stale_job_killed_s"] = time.monotonic() - cleared_mono
        wait_task_process_end(ti1["id"], "try 1")
        FIGURES["clear_to_stale_task_process_end_s"] = time.monotonic() - cleared_mono

        ti2 = api.wait_ti(dag_id, run_id, "publish", {"running", "success", "failed"}, timeout=90, try_number=2)
        FIGURES["clear_to_next_try_start_s"] = timestamp(ti2["start_date"]) - cleared_at
        done = api.wait_ti(dag_id, run_id, "publish", {"success", "failed"}, timeout=120, try_number=2)
        assert done["state"] == "success", celery_stack.task_log(dag_id, run_id, "publish", 2)

    assert not heads.errors
    head, record = record_of(repo, "main")
    assert record is not None and record.role == ROLE_PUBLISH
    assert (record.attempt.try_number, record.attempt.ti_id, record.input_ref) == (2, done["id"], base)
    assert head.parents[0] == base
    _staged, staged_record = record_of(repo, head.parents[1])
    assert staged_record is not None and (staged_record.role, staged_record.attempt.try_number) == (ROLE_STAGE, 2)
    assert "-t2-" in read_text(repo, "main", "tables/clear/stamp.txt")
    assert read_text(repo, "main", "tables/clear/part-0.txt") == "rows"
    # Try 1's output never reached the target, at any moment, nor its history.
    assert heads.heads == [base, head.id]
    assert {r.attempt.try_number for c in history(repo, "main", False) if (r := decode_metadata(c.metadata))} == {2}
    assert not signals.done(**{"try": 1}), "try 1's job ran to completion"
    assert xcom(api, dag_id, run_id, "publish", "decision") == "merge"
    assert xcom(api, dag_id, run_id, "publish", "output_ref") == head.id
    assert staging_branches(repo) == []

    tries = api.tries(dag_id, run_id, "publish")
    assert [(t["try_number"], t["hostname"]) for t in tries][:1] == [(1, worker_1)]
    assert [t["try_number"] for t in tries] == [1, 2] and tries[1]["state"] == "success"
    assert tries[0]["state"] != "success" and tries[1]["hostname"] in celery_stack.worker_names
    FIGURES["clear_workers_by_try"] = [t["hostname"] for t in tries]
    # The stale try's own log, on its own worker's disk: stopped by the kill, nothing published.
    where, log_1 = celery_stack.task_log(dag_id, run_id, "publish", 1)
    assert where == worker_1 and "on_kill" in log_1, log_1[-3000:]
    assert "Publish fence" not in log_1
    where_2, log_2 = celery_stack.task_log(dag_id, run_id, "publish", 2)
    assert where_2 == tries[1]["hostname"] and "Publish fence: merge" in log_2, log_2[-3000:]


# -- 2-3. mark failed / mark success of a running fenced task -------------------------------------


def test_marked_failed_and_marked_success_on_workers_publish_nothing(
    celery_stack: CeleryStack, real_lakefs: RealLakeFS, tmp_path: Path
) -> None:
    """Two running tries, marked failed and marked success: killed on their workers, nothing published."""
    api, dag_id = celery_stack.api, "lf_cel_mark"
    assert api is not None
    repo = repository(real_lakefs, "lf-cel-mark")
    marks = {"publish_mark_failed": ("mark-failed", "failed"), "publish_mark_success": ("mark-success", "success")}
    bases = {target: repo.branch(target).get_commit().id for target, _ in marks.values()}
    signals = Signals(tmp_path)
    job = signals.job_spec(files={"tables/mark/part-0.txt": "rows"}, sleep_by_try={"1": 600})
    api.unpause(dag_id)
    with HeadRecorder(repo, "mark-failed") as heads_failed, HeadRecorder(repo, "mark-success") as heads_success:
        run_id = api.trigger(dag_id, {"job": job})
        jobs = {task: signals.wait_started(timeout=120, target=target) for task, (target, _) in marks.items()}
        tis = {task: api.wait_ti(dag_id, run_id, task, {"running"}, timeout=30, try_number=1) for task in marks}
        marked_mono = time.monotonic()
        for task, (_, state) in marks.items():
            api.mark(dag_id, run_id, task, state)
        for task, (_, state) in marks.items():
            wait_for(f"{task}'s job to be killed", lambda task=task: gone(jobs[task]["pid"]), 30)
            FIGURES[f"mark_{state}_to_stale_job_killed_s"] = time.monotonic() - marked_mono
        for task in marks:
            wait_task_process_end(tis[task]["id"], task)
        FIGURES["mark_to_stale_task_processes_end_s"] = time.monotonic() - marked_mono

    FIGURES["mark_workers"] = {task: ti["hostname"] for task, ti in tis.items()}
    for task, (target, state) in marks.items():
        ti = api.task_instance(dag_id, run_id, task)
        # The stale process's end did not overwrite the mark or start another try.
        assert (ti["state"], ti["try_number"], ti["hostname"]) == (state, 1, tis[task]["hostname"]), task
        assert ti["hostname"] in celery_stack.worker_names
        assert repo.branch(target).get_commit().id == bases[target]
        where, log = celery_stack.task_log(dag_id, run_id, task, 1)
        assert where == ti["hostname"] and "StaleAttemptError" in log and "on_kill" in log, log[-3000:]
    for recorder, target in ((heads_failed, "mark-failed"), (heads_success, "mark-success")):
        assert not recorder.errors and recorder.heads == [bases[target]], recorder.heads
    assert signals.done() == [], "a marked try finished its job"
    wait_for("the stale tries' staging branches to be removed", lambda: staging_branches(repo) == [], 30)


# -- 4. a worker dies after its try published ----------------------------------------------------


def test_worker_killed_after_publishing_the_retry_on_the_other_worker_replaces_it(
    celery_stack: CeleryStack, real_lakefs: RealLakeFS, tmp_path: Path
) -> None:
    """SIGKILL of the whole worker after try 1's merge and before Airflow recorded success.

    The scheduler notices the missing heartbeats ([scheduler] task_instance_heartbeat_timeout),
    fails try 1, and the retry runs on the surviving worker: decision ``replace`` (HEAD = try 2's
    staged commit, parent = the input, try 1's merge gone from the history). The abandoned-
    publication sensor, started after the kill, reports try 1's merge as abandoned.
    """
    api, dag_id, repo, base, signals = scenario(
        celery_stack, "lf_cel_kill", repository(real_lakefs, "lf-cel-kill"), tmp_path
    )
    # Try 2's job takes a few seconds: the window in which the sensor sees the abandoned HEAD.
    job = signals.job_spec(
        files={"tables/kill/part-0.txt": "rows"}, stamp_path="tables/kill/stamp.txt", sleep_by_try={"2": 5}
    )
    api.unpause(dag_id)
    api.unpause("lf_cel_watch")
    run_id = api.trigger(dag_id, {"job": job, "hold": {"publish": {"point": "after_verify", "tries": [1]}}})
    held = wait_held(signals, "publish", 1, "after_verify", timeout=120)
    ti1 = api.task_instance(dag_id, run_id, "publish")
    victim = ti1["hostname"]
    assert (ti1["state"], ti1["try_number"], held["worker"]) == ("running", 1, victim)
    merge_1, record_1 = record_of(repo, "main")
    assert record_1 is not None and (record_1.role, record_1.attempt.try_number) == (ROLE_PUBLISH, 1)
    assert merge_1.parents[0] == base
    survivor = next(name for name in celery_stack.worker_names if name != victim)

    killed_at, killed_mono = time.time(), time.monotonic()
    try:
        FIGURES["worker_kill_processes"] = celery_stack.kill_worker(victim)
        watch_run = api.trigger("lf_cel_watch")
        failed = api.wait_ti(dag_id, run_id, "publish", {"up_for_retry", "failed"}, timeout=180)
        FIGURES["worker_death_to_try_failed_s"] = time.monotonic() - killed_mono
        assert (failed["state"], failed["try_number"]) == ("up_for_retry", 1), failed
        ti2 = api.wait_ti(dag_id, run_id, "publish", {"running", "success", "failed"}, timeout=60, try_number=2)
        FIGURES["worker_death_to_next_try_start_s"] = timestamp(ti2["start_date"]) - killed_at
        done = api.wait_ti(dag_id, run_id, "publish", {"success", "failed"}, timeout=120, try_number=2)
        FIGURES["worker_death_to_replacement_s"] = timestamp(done["end_date"]) - killed_at
        assert done["state"] == "success", celery_stack.task_log(dag_id, run_id, "publish", 2)
        watch = api.wait_run("lf_cel_watch", watch_run, {"success", "failed"}, timeout=120)
    finally:
        celery_stack.start_worker(victim)  # the later scenarios want two workers again
    assert watch["state"] == "success"

    tries = api.tries(dag_id, run_id, "publish")
    assert [(t["try_number"], t["state"], t["hostname"]) for t in tries] == [
        (1, "failed", victim),
        (2, "success", survivor),
    ]
    head, record_2 = record_of(repo, "main")
    assert record_2 is not None and (record_2.role, record_2.attempt.try_number) == (ROLE_STAGE, 2)
    assert record_2.attempt.ti_id == done["id"] and list(head.parents) == [base]
    assert [c.id for c in history(repo, "main", True)] == [head.id, base]
    assert merge_1.id not in {c.id for c in history(repo, "main", False)}
    assert "-t2-" in read_text(repo, "main", "tables/kill/stamp.txt")
    assert xcom(api, dag_id, run_id, "publish", "decision") == "replace"
    assert xcom(api, dag_id, run_id, "publish", "output_ref") == head.id
    assert staging_branches(repo) == []
    # The alert: HEAD was try 1's merge, abandoned (Airflow already repairing it).
    verdict = xcom(api, "lf_cel_watch", watch_run, "detect_abandoned", "return_value")
    assert (verdict["verdict"], verdict["head"], verdict["try_number"]) == ("abandoned", merge_1.id, 1), verdict
    assert verdict["retry_pending"] or verdict["replacement_running"], verdict
    FIGURES["abandoned_sensor_verdict"] = {k: verdict[k] for k in ("state", "retry_pending", "replacement_running")}
    watch_worker = api.task_instance("lf_cel_watch", watch_run, "detect_abandoned")["hostname"]
    assert watch_worker == survivor


# -- 5. a backfill onto one target across both workers -------------------------------------------


def test_backfill_of_five_runs_across_both_workers_is_linear(
    celery_stack: CeleryStack, real_lakefs: RealLakeFS, tmp_path: Path
) -> None:
    """Five backfilled runs onto one target, through its 1-slot pool, on whichever worker is free."""
    api, dag_id, repo, base, signals = scenario(
        celery_stack, "lf_cel_backfill", repository(real_lakefs, "lf-cel-backfill"), tmp_path
    )
    job = signals.job_spec(files={"tables/daily/part-0.txt": "rows"}, stamp_path="tables/daily/stamp.txt")
    started = time.monotonic()
    with HeadRecorder(repo, "main") as heads:
        runs = run_backfill(api, dag_id, job)
    FIGURES["backfill_5_runs_s"] = time.monotonic() - started
    windows = assert_linear_backfill(api, repo, dag_id, runs, base, heads)
    assert all(w["hostname"] in celery_stack.worker_names for w in windows)
    resolves = [api.task_instance(dag_id, r["dag_run_id"], "resolve_input") for r in runs]
    by_worker = Counter(t["hostname"] for t in [*windows, *resolves])
    FIGURES["backfill_tasks_by_worker"] = dict(by_worker)
    # Ten tasks, each taken by whichever worker asked the broker first: both took some.
    assert set(by_worker) == set(celery_stack.worker_names), by_worker
    FIGURES["backfill_publish_workers"] = [w["hostname"] for w in windows]
    assert staging_branches(repo) == []


# -- 6. lakeFS restarted during a publish --------------------------------------------------------


def test_lakefs_restarted_during_publish_nothing_lost_nothing_twice(
    celery_stack: CeleryStack, real_lakefs: RealLakeFS, tmp_path: Path
) -> None:
    """lakeFS is killed while two publishes hold: one before its merge is sent, one after it landed.

    Each try meets the dead server and fails (or rides it out); a retry finishes. Either way each
    target ends with exactly one publication on top of the input, the successful try's output.
    """
    api, dag_id = celery_stack.api, "lf_cel_lakefs_restart"
    assert api is not None
    repo = repository(real_lakefs, "lf-cel-restart")
    bases = {target: repo.branch(target).get_commit().id for target in RESTART_POINTS}
    tasks = {f"publish_{target.replace('-', '_')}": target for target in RESTART_POINTS}
    signals = Signals(tmp_path)
    job = signals.job_spec(files={"tables/restart/part-0.txt": "rows"}, stamp_path="tables/restart/stamp.txt")
    hold = {task: {"point": RESTART_POINTS[target], "tries": [1]} for task, target in tasks.items()}
    api.unpause(dag_id)
    run_id = api.trigger(dag_id, {"job": job, "hold": hold})
    helds = {task: wait_held(signals, task, 1, RESTART_POINTS[target], timeout=120) for task, target in tasks.items()}
    merged_before_restart = repo.branch("after-merge").get_commit()
    assert decode_metadata(merged_before_restart.metadata) is not None  # the held merge has landed
    assert repo.branch("before-merge").get_commit().id == bases["before-merge"]

    down_mono = time.monotonic()
    real_lakefs.kill()  # a crash: SIGKILL, then the same binary on the same port and data
    for task, target in tasks.items():
        release(signals, task, 1, RESTART_POINTS[target])

    def met_the_outage() -> bool:
        # Each try's own log, on its worker: its publish call found lakeFS gone.
        return all("outcome unknown" in celery_stack.task_log(dag_id, run_id, task, 1)[1].lower() for task in tasks)

    wait_for("both publishes to meet the stopped lakeFS", met_the_outage, 60, interval=0.1)
    real_lakefs.start()
    FIGURES["lakefs_down_s"] = time.monotonic() - down_mono
    run = api.wait_run(dag_id, run_id, {"success", "failed"}, timeout=240)
    assert run["state"] == "success", {t: celery_stack.task_log(dag_id, run_id, t, 1)[1][-3000:] for t in tasks}

    outcomes = {}
    for task, target in tasks.items():
        tries = api.tries(dag_id, run_id, task)
        final = tries[-1]
        decision = xcom(api, dag_id, run_id, task, "decision")
        output_ref = xcom(api, dag_id, run_id, task, "output_ref")
        outcomes[target] = {
            "tries": [(t["try_number"], t["state"], t["hostname"]) for t in tries],
            "decision": decision,
        }
        assert final["state"] == "success" and all(t["state"] == "failed" for t in tries[:-1]), tries
        head, record = record_of(repo, target)
        assert head.id == output_ref and record is not None
        current = api.task_instance(dag_id, run_id, task)  # the tries listing carries no task-instance id
        assert current["try_number"] == final["try_number"]
        assert record.attempt.try_number == final["try_number"] and record.attempt.ti_id == current["id"]
        # Exactly one publication on top of the input: a merge, or the staged commit itself (replace).
        assert [c.id for c in history(repo, target, True)] == [head.id, bases[target]]
        reachable = publications(repo, target)
        if decision in ("merge", "idempotent"):
            assert [c.id for c in reachable] == [head.id] and record.role == ROLE_PUBLISH
        else:
            assert decision == "replace" and reachable == [] and record.role == ROLE_STAGE
            assert merged_before_restart.id not in {c.id for c in history(repo, target, False)}
        stamp = read_text(repo, target, "tables/restart/stamp.txt")
        assert f"-t{final['try_number']}-" in stamp
        assert read_text(repo, target, "tables/restart/part-0.txt") == "rows"
    if outcomes["before-merge"]["decision"] != "merge":
        pytest.fail(f"a publish held before its merge cannot find an earlier publication: {outcomes}")
    FIGURES["lakefs_restart_outcomes"] = outcomes
    FIGURES["lakefs_restart_held_on"] = {task: h["worker"] for task, h in helds.items()}
    wait_for("the failed tries' staging branches to be removed", lambda: staging_branches(repo) == [], 30)
