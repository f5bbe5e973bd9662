"""DAGs of benchmarks/backfill_throughput.py: one daily table, published two ways.

* ``bf_one_writer``: today's one-writer setup (docs/howto/one-writer-per-target.md): the
  branch-wide fence, a 1-slot pool for the target branch, ``max_active_tis_per_dag=1``,
  ``depends_on_past`` on the publish and ``depends_on_past, wait_for_downstream`` on the resolve task.
* ``bf_scoped_4`` and ``bf_scoped_8`` (the same DAG twice, for two backfills): the scoped fence
  (docs/howto/many-writers.md): ``fence_scope="prefixes"``, the write set
  ``tables/daily/date={{ ds }}/``, no pool, no ``depends_on_past``; how many dates run at once is
  the backfill's ``max_active_runs``.

Both have the same two tasks (resolve the target, publish), and the same job: the fake spark-submit
(tests/fake_spark) running tests/stack/partition_job.py, which sleeps ``dag_run.conf["job"]["sleep"]``
seconds (a remote cluster's job of fixed duration) and writes one file into the date's partition.
Each publish records, in ``dag_run.conf["job"]["signal_dir"]``, when it passed the failpoints
``after_job``, ``after_fence_2`` and ``after_verify`` (the publish latency). Each DAG writes its own
repository (:data:`REPOSITORIES`), which the benchmark creates.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_lakefence import failpoints
from airflow_lakefence.operators import FencedSparkPublishOperator, LakeFSResolveRefOperator

REPO = Path(__file__).resolve().parent.parent
FAKE_PATH = f"{REPO / 'tests' / 'fake_spark'}{os.pathsep}{os.environ.get('PATH', '')}"
JOB = str(REPO / "tests" / "stack" / "partition_job.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")
DAYS = 16
ONE_WRITER_POOL = "lakefs_bf-one_main"
#: dag_id -> repository (target branch ``main``).
REPOSITORIES = {"bf_one_writer": "bf-one", "bf_scoped_4": "bf-scoped-4", "bf_scoped_8": "bf-scoped-8"}
#: The failpoints whose passing time each publish records.
TIMED_POINTS = ("after_job", "after_fence_2", "after_verify")


def _record_times(context: Any) -> None:
    """``pre_execute``: record when this try passes each of :data:`TIMED_POINTS`."""
    ti = context["ti"]
    signal_dir = Path((context["dag_run"].conf or {})["job"]["signal_dir"])
    stem = f"{ti.dag_id}.{context['ds']}.t{ti.try_number}"

    def recorder(point: str) -> Any:
        def record() -> None:
            (signal_dir / f"{stem}.{point}").write_text(json.dumps(time.time()))

        return record

    for point in TIMED_POINTS:
        failpoints.arm(point, recorder(point))


def _publish(dag_id: str, input_ref: Any, **kwargs: Any) -> FencedSparkPublishOperator:
    return FencedSparkPublishOperator(
        task_id="publish",
        conn_id="spark_local",
        application=JOB,
        application_args=["spec={{ dag_run.conf.get('job', {}) | tojson }}", "date={{ ds }}"],
        env_vars={"PATH": FAKE_PATH, "LAKEFENCE_TEST_PYTHON": sys.executable},
        repository=REPOSITORIES[dag_id],
        target_branch="main",
        input_ref=input_ref,
        write_mode="workspace",
        commit_message="publish {{ ds }}",
        retries=0,
        pre_execute=_record_times,
        **kwargs,
    )


def _dag(dag_id: str) -> DAG:
    return DAG(dag_id, schedule="@daily", start_date=START, end_date=START.add(days=DAYS - 1), catchup=False)


with _dag("bf_one_writer"):
    _resolve = LakeFSResolveRefOperator(
        task_id="resolve_input", repository=REPOSITORIES["bf_one_writer"], ref="main",
        depends_on_past=True, wait_for_downstream=True,
    )
    _publish(
        "bf_one_writer", _resolve.output, pool=ONE_WRITER_POOL, max_active_tis_per_dag=1, depends_on_past=True
    )

# One scoped DAG per width (a backfill's dates run once per DAG), identical but for their repository.
for _dag_id in ("bf_scoped_4", "bf_scoped_8"):
    with _dag(_dag_id):
        _resolve = LakeFSResolveRefOperator(task_id="resolve_input", repository=REPOSITORIES[_dag_id], ref="main")
        _publish(_dag_id, _resolve.output, fence_scope="prefixes", output_prefixes=["tables/daily/date={{ ds }}/"])
