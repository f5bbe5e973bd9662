"""A scoped backfill under the real scheduler, CeleryExecutor with two workers, real lakeFS, with faults.

Sixteen dates of tests/dags/celery_dags.py's ``lf_cel_scoped_backfill`` (``fence_scope="prefixes"``,
each date writing ``tables/daily/date=<ds>/``, no pool, no ``depends_on_past``) are backfilled
through Airflow's backfill API with up to eight runs active; the two workers' four slots run four
dates at once. While it runs the test injects, in this order:

1. **a lakeFS restart** (SIGKILL, then the same binary on the same data) while one date's publish
   is held right after its merge landed: that try meets the dead server and either rides the outage
   out (it finds its own merge after the restart) or fails, and then its retry must replace that
   publication by merges while other dates' publications sit on top of it;
2. **a clear of a running try** while its job runs: the stale try never publishes, the next one does;
3. **a worker SIGKILL after a publish**: the worker dies with one date's try held right after its
   merge was verified (and whatever else it ran); the scheduler's heartbeat timeout fails those
   tries and their retries, on either worker, replace their earlier publications.

Then, on lakeFS: every date's partition holds exactly its final try's file, each date has exactly one
live publication (its final try's) and every earlier publication of a date was reverted by that
date's own replacement, nothing else is in the history, and no staging branch is left. From the
tries' start and end times in the metadata DB: at least four dates' tries ran at once.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.fences.scope import SCOPED_REVERTS_KEY
from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, ROLE_STAGE, decode_metadata
from tests.celery.conftest import FIGURES
from tests.dags.celery_dags import SCOPED_DAYS, START, date_hold_name
from tests.stack.airflow_stack import wait_for
from tests.stack.celery import CeleryStack
from tests.stack.tier import (
    Signals,
    gone,
    history,
    read_text,
    staging_branches,
    start_backfill,
    timestamp,
    wait_task_process_end,
    xcom,
)
from tests.stack.tier import repository as tier_repository
from tests.tools.real_lakefs import RealLakeFS

pytestmark = [pytest.mark.celery, pytest.mark.real_lakefs, pytest.mark.scoped]

DAG_ID = "lf_cel_scoped_backfill"
DAYS = [START.add(days=n).to_date_string() for n in range(SCOPED_DAYS)]
RESTART_DAY, CLEAR_DAY, KILL_DAY = DAYS[0], DAYS[1], DAYS[2]
#: The job's fixed duration: long enough that four dates' jobs overlap on this 2-core machine.
JOB_S = 6.0


def repository(server: RealLakeFS, name: str) -> lakefs.Repository:
    client = lakefs.Client(host=server.url, username=server.access_key_id, password=server.secret_access_key)
    return tier_repository(client, name)


def wait_held(signals: Signals, day: str, point: str, timeout: float) -> int:
    """Wait until a try of ``day`` holds at ``point``; return its try number."""
    stem = date_hold_name(day, point)

    def held() -> int | None:
        found = sorted(signals.directory.glob(f"{stem}.t*.held"))
        return int(found[0].name.removeprefix(f"{stem}.t").split(".")[0]) if found else None

    return wait_for(f"a try of {day} to hold at {point}", held, timeout)


def release(signals: Signals, day: str, point: str) -> None:
    (signals.directory / f"{date_hold_name(day, point)}.go").touch()


def max_overlap(windows: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant."""
    events = sorted([(start, 1) for start, _ in windows] + [(end, -1) for _, end in windows])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def test_scoped_backfill_of_16_dates_with_faults_one_publication_per_date(
    celery_stack: CeleryStack, real_lakefs: RealLakeFS, tmp_path: Path
) -> None:
    """16 dates, ≥ 4 at once, a lakeFS restart, a clear and a worker SIGKILL: each partition exactly once."""
    api = celery_stack.api
    assert api is not None
    repo = repository(real_lakefs, "lf-cel-scoped")
    base = repo.branch("main").get_commit().id
    signals = Signals(tmp_path)
    job = signals.job_spec(sleep=JOB_S, block_dates=[CLEAR_DAY])
    hold = {RESTART_DAY: "after_publish_action", KILL_DAY: "after_verify"}
    started = time.monotonic()
    backfill, run_of = start_backfill(api, DAG_ID, DAYS, {"job": job, "hold_dates": hold}, max_active_runs=8)

    # 1. lakeFS restarted while a publish is held right after its merge landed.
    restart_try = wait_held(signals, RESTART_DAY, "after_publish_action", timeout=180)
    down = time.monotonic()
    real_lakefs.kill()
    release(signals, RESTART_DAY, "after_publish_action")

    def met_the_outage() -> bool:
        _, log = celery_stack.task_log(DAG_ID, run_of[RESTART_DAY], "publish", restart_try)
        return "outcome unknown" in log.lower()

    wait_for(f"{RESTART_DAY}'s try to meet the stopped lakeFS", met_the_outage, 60, interval=0.1)
    real_lakefs.start()
    FIGURES["scoped_backfill_lakefs_down_s"] = time.monotonic() - down

    # 2. A running try cleared while its job runs (it waits for the test); the next try runs unblocked.
    blocked = signals.wait_started(timeout=180, date=CLEAR_DAY)
    cleared_try = int(blocked["try"])
    ti = api.wait_ti(DAG_ID, run_of[CLEAR_DAY], "publish", {"running"}, timeout=60, try_number=cleared_try)
    api.clear(DAG_ID, run_of[CLEAR_DAY], "publish")
    wait_for("the cleared try's job to be killed", lambda: gone(blocked["pid"]), 60)
    wait_task_process_end(ti["id"], f"{CLEAR_DAY} try {cleared_try}", timeout=60)
    (signals.directory / f"{CLEAR_DAY}.unblock").touch()

    # 3. The worker running a try held right after its verified publish dies, and comes back at once.
    kill_try = wait_held(signals, KILL_DAY, "after_verify", timeout=180)
    victim = api.task_instance(DAG_ID, run_of[KILL_DAY], "publish")["hostname"]
    FIGURES["scoped_backfill_killed_processes"] = celery_stack.kill_worker(victim)
    celery_stack.start_worker(victim)
    release(signals, KILL_DAY, "after_verify")  # later tries of that date pass

    def finished() -> list[dict[str, Any]] | None:
        states = api.dag_runs(DAG_ID)
        return states if all(r["state"] in ("success", "failed") for r in states) else None

    final_runs = wait_for("every date to finish", finished, 420, interval=2)
    FIGURES["scoped_backfill_16_dates_s"] = time.monotonic() - started
    assert [r["state"] for r in final_runs] == ["success"] * SCOPED_DAYS, final_runs
    assert api.backfill(backfill["id"])["dag_id"] == DAG_ID

    final_try = {day: int(api.task_instance(DAG_ID, run_of[day], "publish")["try_number"]) for day in DAYS}
    FIGURES["scoped_backfill_tries"] = {day: n for day, n in final_try.items() if n > 1}
    assert final_try[KILL_DAY] > kill_try and final_try[CLEAR_DAY] > cleared_try

    # Every partition holds exactly its final try's output: one file, nothing stacked.
    main = repo.branch("main")
    for day in DAYS:
        prefix = f"tables/daily/date={day}/"
        paths = [o.path for o in main.objects(prefix=prefix)]
        assert paths == [f"{prefix}part-t{final_try[day]}.txt"], (day, paths)
        assert read_text(repo, "main", paths[0]).startswith(f"{day} lakefence")
    assert sorted({o.path.split("/date=")[0] for o in main.objects()}) == ["tables/daily"]

    # The history: per date, one live publication (the final try's) and every earlier one reverted.
    # A first publication is a merge of the staged commit S onto HEAD. A replacement (merges only) is
    # a revert of the earlier S (carrying the replacing try's stage record) and a merge of the new S
    # on a temporary branch, merged onto HEAD as the publication.
    commits = history(repo, "main", False)
    assert commits[-1].id == base
    by_id = {c.id: c for c in commits}
    records = {c.id: decode_metadata(c.metadata) for c in commits}
    publications: dict[str, list[Any]] = defaultdict(list)
    reverted: dict[str, str] = {}  # the reverted S -> the run whose try reverted it
    staged, inner_merges = set(), set()
    for commit in commits[:-1]:
        record = records[commit.id]
        if record is None:  # the inner merge of a replacement: the revert, then the new S
            revert, new_stage = (records.get(p) for p in commit.parents)
            assert len(commit.parents) == 2 and SCOPED_REVERTS_KEY in by_id[commit.parents[0]].metadata, commit
            assert revert is not None and new_stage is not None and new_stage.role == ROLE_STAGE, commit
            assert revert.attempt == new_stage.attempt, commit  # one try's revert and its own output
            inner_merges.add(commit.id)
        elif SCOPED_REVERTS_KEY in commit.metadata:
            assert record.role == ROLE_STAGE
            reverted[commit.metadata[SCOPED_REVERTS_KEY]] = record.attempt.key.run_id
        elif record.role == ROLE_PUBLISH:
            publications[commit.metadata["logical_date"]].append((commit, record))
        else:
            staged.add(commit.id)

    def staged_of(publication: Any) -> str:
        """The staged commit a publication brought in (through the inner merge of a replacement)."""
        second = publication.parents[1]
        return by_id[second].parents[1] if second in inner_merges else second

    replaced = {}
    for day in DAYS:
        live = [(c, r) for c, r in publications[day] if r.attempt.try_number == final_try[day]]
        assert len(live) == 1, (day, [(c.id, r.attempt.try_number) for c, r in publications[day]])
        commit, record = live[0]
        assert record.attempt.key.run_id == run_of[day] and len(commit.parents) == 2
        stage_record = records[staged_of(commit)]
        assert stage_record is not None and stage_record.attempt == record.attempt
        assert xcom(api, DAG_ID, run_of[day], "publish", "staged_commit") == staged_of(commit)
        earlier = [(c, r) for c, r in publications[day] if r.attempt.try_number != final_try[day]]
        for old, old_record in earlier:
            # Replaced by the date's own later try: its staged commit reverted, by this date's key.
            assert old_record.attempt.try_number < final_try[day]
            assert reverted.get(staged_of(old)) == run_of[day], (day, old.id, reverted)
        replaced[day] = len(earlier)
    assert replaced[KILL_DAY] >= 1 and xcom(api, DAG_ID, run_of[KILL_DAY], "publish", "decision") == "replace"
    restart_decision = xcom(api, DAG_ID, run_of[RESTART_DAY], "publish", "decision")
    if final_try[RESTART_DAY] == restart_try:
        # The held try rode the outage out: after the restart it found its own merge (a lost answer).
        assert restart_decision in ("merge", "idempotent") and replaced[RESTART_DAY] == 0, restart_decision
    else:
        # It failed on the dead server; a later try replaced its publication, others' on top of it.
        assert restart_decision == "replace" and replaced[RESTART_DAY] >= 1, (restart_decision, replaced)
    FIGURES["scoped_backfill_restart_outcome"] = {"tries": final_try[RESTART_DAY], "decision": restart_decision}
    # The cleared try staged nothing that reached the target.
    assert all(r.attempt.try_number != cleared_try for _, r in publications[CLEAR_DAY])
    assert not signals.done(date=CLEAR_DAY, **{"try": cleared_try})
    # Nothing in the history but the dates' publications, their staged commits, reverts and inner merges.
    assert staged == {staged_of(c) for pubs in publications.values() for c, _ in pubs}
    assert len(commits) - 1 == sum(map(len, publications.values())) + len(staged) + len(reverted) + len(inner_merges)
    assert len(reverted) == sum(replaced.values())
    FIGURES["scoped_backfill_replaced"] = {day: n for day, n in replaced.items() if n}

    # At least four dates' publishing tries ran at once (their start and end in the metadata DB).
    tries = [t for day in DAYS for t in api.tries(DAG_ID, run_of[day], "publish")]
    FIGURES["scoped_backfill_tries_by_worker"] = dict(Counter(t["hostname"] for t in tries))
    ran = [(timestamp(t["start_date"]), timestamp(t["end_date"])) for t in tries if t["start_date"] and t["end_date"]]
    FIGURES["scoped_backfill_max_tries_at_once"] = peak = max_overlap(ran)
    assert peak >= 4, sorted(ran)
    # The jobs' own windows overlap less (a try's start-up and publish are outside them): a figure only.
    done = {s["staging"]: s for s in signals.done()}
    jobs = [(s["time"], done[s["staging"]]["time"]) for s in signals.started() if s["staging"] in done]
    FIGURES["scoped_backfill_max_jobs_at_once"] = max_overlap(jobs)
    wait_for("the failed tries' staging branches to be removed", lambda: staging_branches(repo) == [], 60)
