"""DAGs of the reliability suite (tests/reliability), run under ``dag.test()``.

Everything per test comes from ``dag_run.conf``: ``repository``, ``target``, ``input_ref``, ``job``
(the spec of tests/reliability/race_job.py), ``output_prefixes``, ``metadata`` (commit metadata).
The Spark engine is tests/fake_spark/spark-submit (no JVM); Airflow, the SparkSubmitHook and lakeFS
are real. A failed try's exception is kept in :data:`FAILURES`.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_lakefence.operators import FencedSparkPublishOperator
from airflow_lakefence.operators.cleanup import LakeFSStagingCleanupOperator

# The one shared factory (tests/dags/dag_factory.py), by path: the dags folder is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dag_factory import failure_recording_dag, fenced_spark

JOB = str(Path(__file__).resolve().parent.parent / "reliability" / "race_job.py")

#: (dag_id, try_number) -> the exception that try raised.
FAILURES: dict[tuple[str, int], BaseException] = {}


def fenced(task_id: str = "publish", **kwargs: Any) -> FencedSparkPublishOperator:
    """The fenced task every DAG here runs (race_job.py), configured from ``dag_run.conf``."""
    kwargs.setdefault("output_prefixes", "{{ dag_run.conf.get('output_prefixes') }}")
    return fenced_spark(task_id, job=JOB, **kwargs)


def reliability_dag(dag_id: str, retries: int = 0) -> DAG:
    """A DAG with native rendering (so conf values keep their types) and failure capture."""
    return failure_recording_dag(dag_id, FAILURES, retries)


with reliability_dag("rel_workspace") as workspace_dag:
    fenced(write_mode="workspace", commit_metadata="{{ dag_run.conf.get('metadata') }}")

with reliability_dag("rel_direct") as direct_dag:
    fenced(write_mode="direct")

with reliability_dag("rel_retry", retries=1) as retry_dag:
    fenced(write_mode="workspace")

with reliability_dag("rel_budget") as budget_dag:
    fenced(write_mode="workspace", execution_timeout=timedelta(seconds=30), publish_budget=timedelta(seconds=29))

with reliability_dag("rel_clean") as clean_dag:
    LakeFSStagingCleanupOperator(
        task_id="clean",
        repository="{{ dag_run.conf['repository'] }}",
        publishers=[("rel_workspace", "publish"), ("rel_direct", "publish"), ("rel_retry", "publish")],
    )
