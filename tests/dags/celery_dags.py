"""DAGs of the Celery tier (tests/celery): the fenced publish on several Celery workers.

Like tests/dags/scheduler_dags.py: fixed repositories and targets (a pool has one slot per target,
fixed at parse time; the tier creates the repositories), the job spec of
tests/scheduler/sched_job.py in ``dag_run.conf["job"]``, the fake ``spark-submit``
(tests/fake_spark). What a try does at a protocol boundary comes from ``dag_run.conf["hold"]``:
``{task_id: {"point": <failpoint>, "tries": [1]}}`` makes those tries stop at that failpoint, drop
``<signal_dir>/<task_id>.t<try>.<point>.held`` (JSON: pid, worker, try, time) and wait until the
tier drops ``...go`` next to it. The tier acts in that window (kills the worker, restarts lakeFS),
from outside, at a point it knows the task has reached.

Importing this file has no side effects.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import DAG

from airflow_lakefence import failpoints
from airflow_lakefence.operators import FencedSparkPublishOperator, LakeFSResolveRefOperator
from airflow_lakefence.sensors import AbandonedPublicationSensor

HERE = Path(__file__).resolve().parent
FAKE_PATH = f"{HERE.parent / 'fake_spark'}{os.pathsep}{os.environ.get('PATH', '')}"
JOB = str(HERE.parent / "scheduler" / "sched_job.py")
PARTITION_JOB = str(HERE.parent / "celery" / "partition_job.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")
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
}
#: The failpoint each target of lf_cel_lakefs_restart holds at: before the merge is sent, after it landed.
RESTART_POINTS = {"before-merge": "after_publish_read", "after-merge": "after_publish_action"}


def pool_name(repository: str, target: str) -> str:
    """The 1-slot pool of one target branch."""
    return f"lakefs_{repository}_{target}"


def held_name(task_id: str, try_number: int, point: str) -> str:
    """The file name a held try drops (``.held``) and waits for (``.go``), without the suffix."""
    return f"{task_id}.t{try_number}.{point}"


def date_hold_name(day: str, point: str) -> str:
    """The stem of the files of a scoped backfill's date held at ``point`` (see :func:`_hold_date_at_failpoint`)."""
    return f"publish@{day}.{point}"


def _hold_date_at_failpoint(context: Any) -> None:
    """``pre_execute`` of the scoped backfill: hold *any* try of a date at a failpoint until released.

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


def _publish(task_id: str, repository: str, target: str, input_ref: Any, **kwargs: Any) -> FencedSparkPublishOperator:
    options: dict[str, Any] = {"pre_execute": _hold_at_failpoint, **kwargs}
    return FencedSparkPublishOperator(
        task_id=task_id,
        conn_id="spark_local",
        application=JOB,
        application_args=["spec={{ dag_run.conf.get('job', {}) | tojson }}"],
        env_vars={"PATH": FAKE_PATH, "LAKEFENCE_TEST_PYTHON": sys.executable},
        repository=repository,
        target_branch=target,
        input_ref=input_ref,
        write_mode="workspace",
        commit_message=f"{task_id} {{{{ run_id }}}}",
        # One writer per target across all workers: a 1-slot pool per target, one active try per task.
        pool=pool_name(repository, target),
        max_active_tis_per_dag=1,
        **options,
    )


def _dag(dag_id: str, **kwargs: Any) -> DAG:
    params: dict[str, Any] = {
        "schedule": None,
        "start_date": START,
        "catchup": False,
        "tags": ["lakefence-celery-test"],
        **kwargs,
    }
    return DAG(dag_id, **params)


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

# 5. A backfill onto one target across both workers (see docs/real-scheduler.md for why the
# resolve task depends on the previous run's publish).
_repo, (_target,) = TARGETS["lf_cel_backfill"]
with _dag("lf_cel_backfill", schedule="@daily", end_date=START.add(days=4)):
    _resolve = LakeFSResolveRefOperator(
        task_id="resolve_input", repository=_repo, ref=_target, depends_on_past=True, wait_for_downstream=True
    )
    _publish(
        "publish",
        _repo,
        _target,
        _resolve.output,
        depends_on_past=True,
        retries=0,
        commit_metadata={"logical_date": "{{ logical_date.isoformat() }}"},
    )

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
