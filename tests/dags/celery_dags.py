"""DAGs of the Celery tier (tests/celery): the fenced publish on several Celery workers.

Like tests/dags/scheduler_dags.py: fixed repositories and targets (a pool has one slot per target,
fixed at parse time; the tier creates the repositories), the job spec of
tests/stack/sched_job.py in ``dag_run.conf["job"]``, the fake ``spark-submit``
(tests/fake_spark). What a try does at a protocol boundary comes from ``dag_run.conf["hold"]``:
``{task_id: {"point": <failpoint>, "tries": [1]}}`` makes those tries stop at that failpoint, drop
``<signal_dir>/<task_id>.t<try>.<point>.held`` (JSON: pid, worker, try, time) and wait until the
tier drops ``...go`` next to it. The tier acts in that window (kills the worker, restarts lakeFS),
from outside, at a point it knows the task has reached.

Importing this file has no side effects.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow_lakefence import failpoints
from airflow_lakefence.operators import (
    FencedPythonPublishOperator,
    FencedSparkPublishOperator,
    LakeFSResolveRefOperator,
)
from airflow_lakefence.operators.run_branch import LakeFSPublishRunOperator, LakeFSRunBranchOperator
from airflow_lakefence.sensors import AbandonedPublicationSensor

# The one shared factory (tests/dags/dag_factory.py), by path: the dags folder is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dag_factory import FAKE_PATH, START, stack_backfill, stack_dag, stack_publish

HERE = Path(__file__).resolve().parent
PARTITION_JOB = str(HERE.parent / "stack" / "partition_job.py")
#: How long a held try waits for the tier's "go" before going on by itself.
HOLD_LIMIT_S = 600.0

#: dag_id -> (repository, [target branches]); the tier creates these.
TARGETS: dict[str, tuple[str, list[str]]] = {
    "lf_cel_clear": ("lf-cel-clear", ["main"]),
    "lf_cel_mark": ("lf-cel-mark", ["mark-failed", "mark-success"]),
    "lf_cel_kill": ("lf-cel-kill", ["main"]),
    "lf_cel_backfill": ("lf-cel-backfill", ["main"]),
    "lf_cel_lakefs_restart": ("lf-cel-restart", ["before-merge", "after-merge"]),
    "lf_cel_scoped_backfill": ("lf-cel-scoped", ["main"]),
    "lf_cel_run_branch_backfill": ("lf-cel-run-branch", ["main"]),
}
#: The failpoint each target of lf_cel_lakefs_restart holds at: before the merge is sent, after it landed.
RESTART_POINTS = {"before-merge": "after_publish_read", "after-merge": "after_publish_action"}


def held_name(task_id: str, try_number: int, point: str) -> str:
    """The file name a held try drops (``.held``) and waits for (``.go``), without the suffix."""
    return f"{task_id}.t{try_number}.{point}"


def date_hold_name(day: str, point: str) -> str:
    """The stem of the files of a scoped backfill's date held at ``point`` (see :func:`_hold_date_at_failpoint`)."""
    return f"publish@{day}.{point}"


def _hold_date_at_failpoint(context: Any) -> None:
    """``pre_execute`` of the backfills (scoped, run branch): hold *any* try of a date at a failpoint until released.

    ``dag_run.conf["hold_dates"]`` is ``{date: point}`` (one conf serves every run of a backfill).
    A try reaching the point drops ``<stem>.t<try>.held`` and waits until ``<stem>.go`` exists
    (:func:`date_hold_name`); once released, later tries of that date pass at once. Any try: which
    try gets there first depends on the other faults the test injects.
    """
    ti = context["ti"]
    conf = context["dag_run"].conf or {}
    point = conf.get("hold_dates", {}).get(context["ds"])
    if not point:
        return
    signal_dir = Path(conf["job"]["signal_dir"])
    stem = date_hold_name(context["ds"], point)
    hits = {"n": 0}

    def held() -> None:
        hits["n"] += 1
        go = signal_dir / f"{stem}.go"
        if hits["n"] > 1 or go.exists():
            return
        payload = {"pid": os.getpid(), "worker": os.environ.get("LAKEFENCE_CELERY_WORKER"), "try": ti.try_number}
        tmp = signal_dir / f"{stem}.t{ti.try_number}.tmp"
        tmp.write_text(json.dumps({**payload, "time": time.time()}))
        tmp.replace(signal_dir / f"{stem}.t{ti.try_number}.held")
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.1)

    failpoints.arm(point, held)


def _hold_at_failpoint(context: Any) -> None:
    """``pre_execute``: arm the failpoint named in ``dag_run.conf["hold"]`` for this task and try."""
    ti = context["ti"]
    conf = context["dag_run"].conf or {}
    hold = conf.get("hold", {}).get(ti.task_id)
    if not hold or ti.try_number not in hold.get("tries", [1]):
        return
    signal_dir = Path(conf["job"]["signal_dir"])
    point = hold["point"]
    name = held_name(ti.task_id, ti.try_number, point)
    hits = {"n": 0}

    def held() -> None:
        hits["n"] += 1
        if hits["n"] > 1:  # a publish's second round passes through the same point: hold once
            return
        payload = {
            "pid": os.getpid(),
            "worker": os.environ.get("LAKEFENCE_CELERY_WORKER"),
            "try": ti.try_number,
            "time": time.time(),
        }
        tmp = signal_dir / f"{name}.tmp"
        tmp.write_text(json.dumps(payload))
        tmp.replace(signal_dir / f"{name}.held")
        deadline = time.monotonic() + HOLD_LIMIT_S
        go = signal_dir / f"{name}.go"
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.1)

    failpoints.arm(point, held)


_publish = functools.partial(stack_publish, pre_execute=_hold_at_failpoint)
_dag = functools.partial(stack_dag, tag="lakefence-celery-test")


# 1. Cleared while running on one worker; the next try runs on whichever worker takes it.
_repo, (_target,) = TARGETS["lf_cel_clear"]
with _dag("lf_cel_clear"):
    _resolve = LakeFSResolveRefOperator(task_id="resolve_input", repository=_repo, ref=_target)
    _publish("publish", _repo, _target, _resolve.output, retries=0)

# 2-3. Marked failed / marked success while running: two targets, two pools, both running at once.
_repo, _mark_targets = TARGETS["lf_cel_mark"]
with _dag("lf_cel_mark"):
    for _target in _mark_targets:
        _name = _target.replace("-", "_")
        _resolve = LakeFSResolveRefOperator(task_id=f"resolve_{_name}", repository=_repo, ref=_target)
        _publish(f"publish_{_name}", _repo, _target, _resolve.output, retries=0)

# 4. The worker dies after try 1 published (held at after_verify); the scheduler's heartbeat
# timeout fails the try, the retry runs on the other worker and replaces the publication.
_repo, (_target,) = TARGETS["lf_cel_kill"]
with _dag("lf_cel_kill"):
    _resolve = LakeFSResolveRefOperator(task_id="resolve_input", repository=_repo, ref=_target)
    _publish("publish", _repo, _target, _resolve.output, retries=1, retry_delay=timedelta(seconds=1))

# 4b. The alert a team would run next to 4: succeeds once the target's HEAD is an abandoned publication.
with _dag("lf_cel_watch"):
    AbandonedPublicationSensor(
        task_id="detect_abandoned",
        repository=_repo,
        branch=_target,
        condition="detect",
        publisher_dag_id="lf_cel_kill",
        publisher_task_id="publish",
        poke_interval=1,
        timeout=300,
        mode="poke",
    )

# 5. A backfill onto one target across both workers (dag_factory.stack_backfill says why the tasks
# depend on the past).
_repo, (_target,) = TARGETS["lf_cel_backfill"]
with _dag("lf_cel_backfill", schedule="@daily", end_date=START.add(days=4)):
    stack_backfill(_publish, _repo, _target)

# 6. lakeFS restarted during a publish: one task held before its merge is sent, one after it landed.
_repo, _restart_targets = TARGETS["lf_cel_lakefs_restart"]
with _dag("lf_cel_lakefs_restart"):
    for _target in _restart_targets:
        _name = _target.replace("-", "_")
        _resolve = LakeFSResolveRefOperator(task_id=f"resolve_{_name}", repository=_repo, ref=_target)
        # Retries with a short delay: a try that meets the stopped lakeFS fails, a later one publishes.
        _publish(f"publish_{_name}", _repo, _target, _resolve.output, retries=3, retry_delay=timedelta(seconds=3))

# 7. A scoped backfill: every date publishes its own partition of one table into main, no pool and
# no depends_on_past, so several dates run and publish at once (docs/howto/many-writers.md). The
# input is the target itself, resolved and pinned by each date's first try.
_repo, (_target,) = TARGETS["lf_cel_scoped_backfill"]
#: How many dates the scoped backfill covers, from START.
SCOPED_DAYS = 16
with _dag("lf_cel_scoped_backfill", schedule="@daily", end_date=START.add(days=SCOPED_DAYS - 1)):
    FencedSparkPublishOperator(
        task_id="publish",
        conn_id="spark_local",
        application=PARTITION_JOB,
        application_args=["spec={{ dag_run.conf.get('job', {}) | tojson }}", "date={{ ds }}"],
        env_vars={"PATH": FAKE_PATH, "LAKEFENCE_TEST_PYTHON": sys.executable},
        repository=_repo,
        target_branch=_target,
        input_ref=_target,
        write_mode="workspace",
        fence_scope="prefixes",
        output_prefixes=["tables/daily/date={{ ds }}/"],
        commit_message="publish {{ ds }} {{ run_id }}",
        commit_metadata={"logical_date": "{{ ds }}"},
        # A try that meets the restarted lakeFS or the dead worker fails; a later one publishes.
        retries=4,
        retry_delay=timedelta(seconds=3),
        pre_execute=_hold_date_at_failpoint,
    )


# 8. A backfill of a branch per run (docs/howto/branch-per-run.md): each date makes its run branch
# from main, a fenced Python task writes the date's partition into it, and the run is published into
# main scoped to that partition, so dates publish side by side. No pool, no depends_on_past.
_repo, (_target,) = TARGETS["lf_cel_run_branch_backfill"]
#: How many dates the run-branch backfill covers, from START.
RUN_BRANCH_DAYS = 8


def _write_partition(lakefence: Any, ti: Any, ds: str) -> None:
    """The run's task: the date's partition, one file named after the try (two tries stacked show as two)."""
    assert lakefence.workspace is not None
    part = lakefence.workspace / f"tables/daily/date={ds}/part-t{ti.try_number}.txt"
    part.parent.mkdir(parents=True, exist_ok=True)
    part.write_text(f"{ds} {ti.run_id}")


with _dag("lf_cel_run_branch_backfill", schedule="@daily", end_date=START.add(days=RUN_BRANCH_DAYS - 1)):
    # A worker that dies takes its tries with it; their retries run on either worker.
    _retries = {"retries": 3, "retry_delay": timedelta(seconds=2)}
    _branch = LakeFSRunBranchOperator(task_id="run_branch", repository=_repo, source_ref=_target, **_retries)
    _write = FencedPythonPublishOperator(
        task_id="write",
        python_callable=_write_partition,
        repository=_repo,
        target_branch=_branch.output,
        input_ref=_branch.output,
        **_retries,
    )
    LakeFSPublishRunOperator(
        task_id="publish",
        repository=_repo,
        run_branch=_branch.output,
        target_branch=_target,
        input_ref=_branch.input_commit,
        fence_scope="prefixes",
        output_prefixes=["tables/daily/date={{ ds }}/"],
        commit_message="publish {{ ds }} {{ run_id }}",
        commit_metadata={"logical_date": "{{ ds }}"},
        pre_execute=_hold_date_at_failpoint,
        **_retries,
    ).set_upstream(_write)
