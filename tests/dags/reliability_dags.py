"""DAGs of the reliability suite (tests/reliability), run under ``dag.test()``.

Everything per test comes from ``dag_run.conf``: ``repository``, ``target``, ``input_ref``, ``job``
(the spec of tests/reliability/race_job.py), ``output_prefixes``, ``metadata`` (commit metadata).
The Spark engine is tests/fake_spark/spark-submit (no JVM); Airflow, the SparkSubmitHook and lakeFS
are real. A failed try's exception is kept in :data:`FAILURES`.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_lakefence.operators import FencedSparkPublishOperator
from airflow_lakefence.operators.cleanup import LakeFSStagingCleanupOperator

HERE = Path(__file__).resolve().parent
FAKE_PATH = f"{HERE.parent / 'fake_spark'}{os.pathsep}{os.environ.get('PATH', '')}"
JOB = str(HERE.parent / "reliability" / "race_job.py")

#: (dag_id, try_number) -> the exception that try raised.
FAILURES: dict[tuple[str, int], BaseException] = {}


def _record_failure(context: Any) -> None:
    ti = context["ti"]
    FAILURES[(ti.dag_id, ti.try_number)] = context["exception"]


def fenced(task_id: str = "publish", **kwargs: Any) -> FencedSparkPublishOperator:
    """The fenced task every DAG here runs, configured from ``dag_run.conf``."""
    defaults: dict[str, Any] = {
        "conn_id": "spark_local",
        "application": JOB,
        "application_args": ["spec={{ dag_run.conf.get('job', {}) | tojson }}"],
        "env_vars": {"PATH": FAKE_PATH, "LAKEFENCE_TEST_PYTHON": sys.executable},
        "repository": "{{ dag_run.conf['repository'] }}",
        "target_branch": "{{ dag_run.conf['target'] }}",
        "input_ref": "{{ dag_run.conf['input_ref'] }}",
        "output_prefixes": "{{ dag_run.conf.get('output_prefixes') }}",
        "stale_grace_period": 0,
    }
    return FencedSparkPublishOperator(task_id=task_id, **{**defaults, **kwargs})


def reliability_dag(dag_id: str, retries: int = 0) -> DAG:
    """A DAG with native rendering (so conf values keep their types) and failure capture."""
    return DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        render_template_as_native_obj=True,
        default_args={"retries": retries, "retry_delay": timedelta(0), "on_failure_callback": _record_failure},
    )


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
