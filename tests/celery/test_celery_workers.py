"""The fences under the CeleryExecutor with two workers, against a real lakeFS.

One stack per session (tests/celery/conftest.py): Redis, api-server, scheduler (CeleryExecutor),
dag-processor, triggerer (the metadata database on PostgreSQL) and two Celery workers with
separate homes, all on loopback, driven through the REST API as the UI would. Each scenario has
a DAG and target of its own (tests/dags/celery_dags.py) and asserts the target branch (HEAD,
parents, objects, the lakefence record of each commit) and the task history (try numbers,
states, the worker of each try: the task instance's ``hostname``). The figures it measures are
printed in the terminal summary.

The scenarios every executor runs (a cleared try, marked tries, a try that dies after publishing:
here a whole worker killed) are written once in tests/stack/scenarios.py; this module runs them
under the CeleryExecutor (:class:`TestCeleryExecutorScenarios`, the ``executor`` fixture in
tests/celery/conftest.py) and adds what only this tier shows: a backfill across both workers and
lakeFS restarted during a publish.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, ROLE_STAGE, decode_metadata
from tests.celery.conftest import FIGURES, release, repository, wait_held
from tests.dags.celery_dags import RESTART_POINTS
from tests.stack.airflow_stack import wait_for
from tests.stack.celery import CeleryStack
from tests.stack.scenarios import ExecutorScenarios
from tests.stack.tier import (
    HeadRecorder,
    Signals,
    assert_linear_backfill,
    history,
    publications,
    read_text,
    record_of,
    run_backfill,
    scenario,
    staging_branches,
    xcom,
)
from tests.tools.real_lakefs import RealLakeFS

pytestmark = [pytest.mark.celery, pytest.mark.real_lakefs]


# -- 1-4. the scenarios every executor runs (tests/stack/scenarios.py) ---------------------------


class TestCeleryExecutorScenarios(ExecutorScenarios):
    """A cleared try, marked tries, a worker killed after its try published: on two Celery workers."""


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
