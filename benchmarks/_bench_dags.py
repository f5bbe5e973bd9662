"""DAGs of the benchmarks (not a benchmark itself): linked into a throw-away dags folder and run with
``dag.test()`` by publish_latency.py and overhead_vs_spark_submit.py.

Every task records wall-clock marks into :data:`MARKS` (``start`` before ``execute``, ``end`` after
it); the benchmarks add ``spark_start`` / ``spark_end`` through the failpoints around the Spark
step. Everything per run comes from dag_run.conf (repository, target, input_ref, job).
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

from airflow_lakefence.operators import FencedSparkPublishOperator

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FAKE_SPARK_PATH = f"{REPO / 'tests' / 'fake_spark'}{os.pathsep}{os.environ.get('PATH', '')}"
WRITE_JOB = str(REPO / "tests" / "jobs" / "write_job.py")
SPARK_APP = str(HERE / "_spark_app.py")
SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.log.level": "WARN",
    "spark.pyspark.python": sys.executable,
}

#: One dict of ``time.perf_counter()`` marks per try, appended in order.
MARKS: list[dict[str, float]] = []


def mark(name: str) -> None:
    """Record ``name`` at now in the current try's marks."""
    MARKS[-1][name] = time.perf_counter()


def _start(context: Any) -> None:
    MARKS.append({"start": time.perf_counter()})


def _end(context: Any, result: Any) -> None:
    mark("end")


def _dag(dag_id: str) -> DAG:
    return DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        render_template_as_native_obj=True,
        default_args={"retries": 0, "retry_delay": timedelta(0)},
    )


def _fenced(**kwargs: Any) -> FencedSparkPublishOperator:
    return FencedSparkPublishOperator(
        task_id="publish",
        conn_id="spark_local",
        repository="{{ dag_run.conf['repository'] }}",
        target_branch="{{ dag_run.conf['target'] }}",
        input_ref="{{ dag_run.conf['input_ref'] }}",
        write_mode="direct",
        stale_grace_period=0,
        pre_execute=_start,
        post_execute=_end,
        **kwargs,
    )


# The fake spark-submit (tests/fake_spark) runs the job without a JVM: the protocol's own time.
with _dag("bench_fenced_fake") as fenced_fake_dag:
    _fenced(
        application=WRITE_JOB,
        application_args=["spec={{ dag_run.conf.get('job', {}) | tojson }}"],
        env_vars={"PATH": FAKE_SPARK_PATH, "LAKEFENCE_TEST_PYTHON": sys.executable},
    )

# The same, relying on the hard fence (lakeFS's pre-merge hook; the input must carry it).
with _dag("bench_fenced_fake_hard") as fenced_fake_hard_dag:
    _fenced(
        application=WRITE_JOB,
        application_args=["spec={{ dag_run.conf.get('job', {}) | tojson }}"],
        env_vars={"PATH": FAKE_SPARK_PATH, "LAKEFENCE_TEST_PYTHON": sys.executable},
        hard_fence="require",
    )

# The same PySpark application with real Spark, fenced and bare.
with _dag("bench_fenced_spark") as fenced_spark_dag:
    _fenced(application=SPARK_APP, conf=SPARK_CONF)

with _dag("bench_bare_spark") as bare_spark_dag:
    SparkSubmitOperator(
        task_id="publish",
        conn_id="spark_local",
        application=SPARK_APP,
        conf=SPARK_CONF,
        # The bare job writes straight into the target branch; the credentials go through the
        # environment as the fenced operator passes them (the benchmark set them before parsing).
        env_vars={
            "LAKEFS_ENDPOINT": os.environ.get("BENCH_LAKEFS_ENDPOINT", ""),
            "LAKEFS_ACCESS_KEY_ID": os.environ.get("BENCH_LAKEFS_ACCESS_KEY_ID", ""),
            "LAKEFS_SECRET_ACCESS_KEY": os.environ.get("BENCH_LAKEFS_SECRET_ACCESS_KEY", ""),
            "BENCH_REPOSITORY": "{{ dag_run.conf['repository'] }}",
            "BENCH_BRANCH": "{{ dag_run.conf['target'] }}",
        },
        pre_execute=_start,
        post_execute=_end,
    )
