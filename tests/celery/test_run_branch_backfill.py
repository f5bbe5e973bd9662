"""A backfill of a branch per run under the real scheduler, CeleryExecutor with two workers, real lakeFS.

Why the Celery tier: its two workers are separate machines in all but hardware (their own homes,
no database, reaching Airflow only through the Execution API and Redis), so "several workers" is
literal, and a worker can be killed whole (:meth:`~tests.stack.celery.CeleryStack.kill_worker`:
SIGSTOP then SIGKILL of the Celery processes, the supervisors and the task processes), which is
the fault the claim is about. The tier's stack is booted once for the tier, so this scenario costs
only its own run. The LocalExecutor tier's task processes are children of one scheduler: a kill
there is a task process's death, not a worker's.

Eight dates of tests/dags/celery_dags.py's ``lf_cel_run_branch_backfill`` are backfilled through
Airflow's backfill API, all eight runs active at once on the workers' four slots. Each run makes its
run branch from ``main`` (``LakeFSRunBranchOperator``), a fenced Python task writes the date's
partition into it, and ``LakeFSPublishRunOperator`` publishes the run into ``main`` scoped to that
partition (``fence_scope="prefixes"``), so dates publish side by side (docs/howto/branch-per-run.md).

The fault: one date's publishing step is held right after its merge into ``main`` landed and was
verified, before Airflow recorded success (failpoint ``after_verify``); once every other date has
finished, the worker running it is killed (so the kill takes nothing else, and no task the dead
worker had taken but not started waits for the queued timeout), and brought back. The scheduler's
heartbeat timeout fails the try; its retry, on either worker, must replace that publication (the
scoped mode: revert it, merge the retry's), not stack a second one.

Then, on lakeFS: every run succeeded; ``main`` holds each date's partition exactly once (one file,
the run's write); the first-parent history of ``main`` is the input and one publication per run,
plus, for the killed date only, its abandoned publication, reverted by its own replacement; every
publication carries its run's branch; every run branch is kept (the documented default) and holds
its date's partition as ``main`` does; no staging branch is left. From the metadata DB: tries of
at least two runs ran at once, on both workers.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from airflow_lakefence.core.fences.scope import SCOPED_REVERTS_KEY
from airflow_lakefence.core.publication.run_branches import RUN_BRANCH_METADATA_KEY
from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, ROLE_STAGE, decode_metadata
from tests.celery.conftest import FIGURES
from tests.celery.test_scoped_backfill import max_overlap, release, repository, wait_held
from tests.dags.celery_dags import RUN_BRANCH_DAYS, START
from tests.stack.airflow_stack import wait_for
from tests.stack.celery import CeleryStack
from tests.stack.tier import Signals, history, read_text, staging_branches, start_backfill, timestamp, xcom
from tests.tools.real_lakefs import RealLakeFS

pytestmark = [pytest.mark.celery, pytest.mark.real_lakefs, pytest.mark.run_branch, pytest.mark.scoped]

DAG_ID = "lf_cel_run_branch_backfill"
DAYS = [START.add(days=n).to_date_string() for n in range(RUN_BRANCH_DAYS)]
KILL_DAY = DAYS[0]
TASKS = ("run_branch", "write", "publish")


def test_run_branch_backfill_of_8_dates_with_a_worker_killed_after_a_runs_merge(
    celery_stack: CeleryStack, real_lakefs: RealLakeFS, tmp_path: Path
) -> None:
    """8 runs, each on its own run branch, ≥ 2 at once on two workers, a worker killed after one run's
    merge: every run's output once in ``main``."""
    api = celery_stack.api
    assert api is not None
    repo = repository(real_lakefs, "lf-cel-run-branch")
    base = repo.branch("main").get_commit().id
    signals = Signals(tmp_path)
    started = time.monotonic()
    conf = {"job": signals.job_spec(), "hold_dates": {KILL_DAY: "after_verify"}}
    _, run_of = start_backfill(api, DAG_ID, DAYS, conf, max_active_runs=RUN_BRANCH_DAYS)

    # The killed date's publishing step holds right after its merge landed in main.
    kill_try = wait_held(signals, KILL_DAY, "after_verify", timeout=180)
    abandoned = [
        c
        for c in history(repo, "main", True)
        if (r := decode_metadata(c.metadata)) and r.attempt.key.run_id == run_of[KILL_DAY]
    ]
    assert len(abandoned) == 1, abandoned

    def others_finished() -> bool:
        states = {r["logical_date"][:10]: r["state"] for r in api.dag_runs(DAG_ID)}
        unfinished = [d for d in DAYS[1:] if states[d] not in ("success", "failed")]
        return not unfinished

    wait_for("every other date to finish", others_finished, 240, interval=1)
    FIGURES["run_branch_backfill_publications_on_top_of_the_held_one"] = next(
        i for i, c in enumerate(history(repo, "main", True)) if c.id == abandoned[0].id
    )
    held = api.task_instance(DAG_ID, run_of[KILL_DAY], "publish")
    assert (held["state"], held["try_number"]) == ("running", kill_try), held
    FIGURES["run_branch_backfill_killed_processes"] = celery_stack.kill_worker(held["hostname"])
    killed = time.monotonic()
    celery_stack.start_worker(held["hostname"])
    release(signals, KILL_DAY, "after_verify")  # later tries pass

    def finished() -> list[dict[str, Any]] | None:
        states = api.dag_runs(DAG_ID)
        return states if all(r["state"] in ("success", "failed") for r in states) else None

    final_runs = wait_for("every date to finish", finished, 180, interval=1)
    FIGURES["run_branch_backfill_kill_to_done_s"] = round(time.monotonic() - killed, 1)
    FIGURES["run_branch_backfill_8_dates_s"] = round(time.monotonic() - started, 1)
    assert [r["state"] for r in final_runs] == ["success"] * RUN_BRANCH_DAYS, final_runs

    tis = {(day, task): api.task_instance(DAG_ID, run_of[day], task) for day in DAYS for task in TASKS}
    final_try = {day: int(tis[(day, "publish")]["try_number"]) for day in DAYS}
    assert final_try[KILL_DAY] > kill_try
    assert xcom(api, DAG_ID, run_of[KILL_DAY], "publish", "decision") == "replace"
    assert all(xcom(api, DAG_ID, run_of[day], "publish", "decision") == "merge" for day in DAYS[1:])

    # main: each date's partition exactly once (the run's one write), nothing else.
    main = repo.branch("main")
    branch_of = {day: xcom(api, DAG_ID, run_of[day], "run_branch", "return_value") for day in DAYS}
    assert len(set(branch_of.values())) == RUN_BRANCH_DAYS
    for day in DAYS:
        prefix = f"tables/daily/date={day}/"
        paths = [o.path for o in main.objects(prefix=prefix)]
        write_try = int(tis[(day, "write")]["try_number"])
        assert paths == [f"{prefix}part-t{write_try}.txt"], (day, paths)
        assert read_text(repo, "main", paths[0]) == f"{day} {run_of[day]}"
        # The run branch is kept (the default) and holds the partition main holds.
        assert [o.path for o in repo.branch(branch_of[day]).objects(prefix=prefix)] == paths
    assert sorted({o.path.split("/date=")[0] for o in main.objects()}) == ["tables/daily"]

    # The first-parent history of main: the input, then publications only: one per run, and for the
    # killed date also its abandoned one, which its replacement reverted.
    first_parent = history(repo, "main", True)
    assert first_parent[-1].id == base
    by_run: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
    for commit in first_parent[:-1]:
        record = decode_metadata(commit.metadata)
        assert record is not None and record.role == ROLE_PUBLISH, commit
        assert len(commit.parents) == 2, commit
        by_run[record.attempt.key.run_id].append((commit, record))
    assert sorted(by_run) == sorted(run_of.values())
    for day in DAYS:
        pubs = by_run[run_of[day]]
        live = [(c, r) for c, r in pubs if r.attempt.try_number == final_try[day]]
        assert len(live) == 1, (day, [(c.id, r.attempt.try_number) for c, r in pubs])
        assert all(c.metadata[RUN_BRANCH_METADATA_KEY] == branch_of[day] for c, _ in pubs)
        assert live[0][0].metadata["logical_date"] == day
        assert xcom(api, DAG_ID, run_of[day], "publish", "input_ref") == xcom(
            api, DAG_ID, run_of[day], "run_branch", "input_commit"
        )
        assert len(pubs) == (2 if day == KILL_DAY else 1), (day, [(c.id, r.attempt.try_number) for c, r in pubs])
    # The killed date: the abandoned merge (the held try's) and the replacement, whose second parent
    # merges a revert of the abandoned staged commit (by this run's retry) with the retry's own.
    (replacement, new), (old_merge, old) = by_run[run_of[KILL_DAY]]
    assert (old.attempt.try_number, old_merge.id) == (kill_try, abandoned[0].id)
    inner = repo.commit(replacement.parents[1]).get_commit()
    revert, new_stage = (repo.commit(p).get_commit() for p in inner.parents)
    assert revert.metadata[SCOPED_REVERTS_KEY] == old_merge.parents[1]
    revert_record, stage_record = decode_metadata(revert.metadata), decode_metadata(new_stage.metadata)
    assert revert_record is not None and revert_record.attempt == new.attempt
    assert stage_record is not None and (stage_record.role, stage_record.attempt) == (ROLE_STAGE, new.attempt)

    # Parallel: tries of several runs at once, on both workers.
    tries = [t for day in DAYS for task in TASKS for t in api.tries(DAG_ID, run_of[day], task)]
    ran = [(timestamp(t["start_date"]), timestamp(t["end_date"])) for t in tries if t["start_date"] and t["end_date"]]
    FIGURES["run_branch_backfill_max_tries_at_once"] = peak = max_overlap(ran)
    FIGURES["run_branch_backfill_tries_by_worker"] = by_worker = dict(Counter(t["hostname"] for t in tries))
    assert peak >= 2, sorted(ran)
    assert set(celery_stack.worker_names) <= set(by_worker), by_worker
    wait_for("the failed try's staging branch to be removed", lambda: staging_branches(repo) == [], 60)
