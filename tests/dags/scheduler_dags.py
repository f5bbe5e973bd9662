"""DAGs the real-scheduler tests (tests/scheduler) run on a full Airflow stack.

Each DAG publishes into fixed repositories and targets, because a pool (one slot per target) is
fixed at parse time; the tests create the repositories before triggering. dag_run.conf carries
the job spec of tests/stack/sched_job.py (``job``) and, optionally, what a task does to
itself right after its job (``after_job``, see :func:`_act_on_self_after_the_job`). The Spark
engine is tests/fake_spark/spark-submit (the JVM skipped); Airflow, its scheduler, supervisor and
signals, the protocol and lakeFS (the local test server) are all real.

Importing this file has no side effects: the dag.test() suites never load it.
"""

from __future__ import annotations

import functools
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow_lakefence import failpoints
from airflow_lakefence.operators import LakeFSResolveRefOperator

# The one shared factory (tests/dags/dag_factory.py), by path: the dags folder is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dag_factory import START, stack_backfill, stack_dag, stack_publish

#: dag_id -> (repository, [target branches]); the tests create these.
TARGETS: dict[str, tuple[str, list[str]]] = {
    "lf_sched_clear": ("lf-sched-clear", ["main"]),
    "lf_sched_clear_no_grace": ("lf-sched-clear", ["no-grace"]),
    "lf_sched_mark": ("lf-sched-mark", ["mark-failed", "mark-success", "mark-at-fence"]),
    "lf_sched_retry": ("lf-sched-retry", ["main"]),
    "lf_sched_backfill": ("lf-sched-backfill", ["main"]),
}


def _act_on_self_after_the_job(context: Any) -> None:
    """Arm a failpoint that clears or marks this task instance through the REST API once its job ended.

    ``dag_run.conf["after_job"]`` maps task ids to ``"clear"``, ``"success"`` or ``"failed"`` (try 1
    only). It plays the operator's click at the one moment a test process cannot hit from outside:
    after the Spark job, just before attempt fence #1, before the supervisor's next heartbeat (every
    5 s) has noticed, so the fence itself must see that this attempt is no longer current.
    """
    ti = context["ti"]
    action = (context["dag_run"].conf or {}).get("after_job", {}).get(ti.task_id)
    if action is None or ti.try_number != 1:
        return
    import httpx

    base_url = os.environ["AIRFLOW__API__BASE_URL"]  # set by tests/stack/airflow_stack.py

    def act() -> None:
        token = httpx.get(f"{base_url}/auth/token", timeout=10).json()["access_token"]
        with httpx.Client(base_url=f"{base_url}/api/v2", headers={"Authorization": f"Bearer {token}"}) as api:
            if action == "clear":
                body = {"dry_run": False, "dag_run_id": ti.run_id, "task_ids": [ti.task_id], "only_failed": False}
                response = api.post(f"/dags/{ti.dag_id}/clearTaskInstances", json=body)
            else:
                path = f"/dags/{ti.dag_id}/dagRuns/{ti.run_id}/taskInstances/{ti.task_id}"
                response = api.patch(path, json={"new_state": action})
            response.raise_for_status()

    failpoints.arm("after_job", act)


def _crash_after_publish_on_first_try(context: Any) -> None:
    """Arm the ``after_verify=exit`` failpoint in try 1 only: a worker dying right after publishing.

    The task process is a fork of its own, so the variable dies with it; try 2 starts clean.
    """
    if context["ti"].try_number == 1:
        os.environ[failpoints.ENV_VAR] = "after_verify=exit"
    else:
        os.environ.pop(failpoints.ENV_VAR, None)


_publish = functools.partial(stack_publish, pre_execute=_act_on_self_after_the_job)
_dag = functools.partial(stack_dag, tag="lakefence-scheduler-test")


# 1. Cleared mid-Spark, or between the job and attempt fence #1. retries=0 and the default
# retry_delay (300 s): a new try that starts within seconds proves that the stale try did not push
# the restarting task instance into up_for_retry.
_repo, (_target,) = TARGETS["lf_sched_clear"]
with _dag("lf_sched_clear"):
    _resolve = LakeFSResolveRefOperator(task_id="resolve_input", repository=_repo, ref=_target)
    _publish("publish", _repo, _target, _resolve.output, retries=0)

# 1b. The same with stale_grace_period=0: what the grace period is for (the test expects the
# restarting task instance to land in up_for_retry, 300 s away).
_repo, (_target,) = TARGETS["lf_sched_clear_no_grace"]
with _dag("lf_sched_clear_no_grace"):
    _resolve = LakeFSResolveRefOperator(task_id="resolve_input", repository=_repo, ref=_target)
    _publish("publish", _repo, _target, _resolve.output, retries=0, stale_grace_period=0)

# 2. Marked failed / marked success mid-run: three targets, three pools, all running at once.
_repo, _mark_targets = TARGETS["lf_sched_mark"]
with _dag("lf_sched_mark"):
    for _target in _mark_targets:
        _name = _target.replace("-", "_")
        _resolve = LakeFSResolveRefOperator(task_id=f"resolve_{_name}", repository=_repo, ref=_target)
        _publish(f"publish_{_name}", _repo, _target, _resolve.output, retries=0)

# 3. Try 1 dies right after publishing; Airflow retries it on its own; try 2 replaces the publication.
_repo, (_target,) = TARGETS["lf_sched_retry"]
with _dag("lf_sched_retry"):
    _resolve = LakeFSResolveRefOperator(task_id="resolve_input", repository=_repo, ref=_target)
    _publish(
        "publish",
        _repo,
        _target,
        _resolve.output,
        retries=1,
        retry_delay=timedelta(seconds=1),
        pre_execute=_crash_after_publish_on_first_try,
    )

# 4. Backfilled onto one target (dag_factory.stack_backfill says why the tasks depend on the past).
_repo, (_target,) = TARGETS["lf_sched_backfill"]
# end_date keeps the scheduler from adding scheduled runs of its own once the DAG is switched on.
with _dag("lf_sched_backfill", schedule="@daily", end_date=START.add(days=4)):
    stack_backfill(_publish, _repo, _target)
