"""DAGs of the Delta tier, run under ``dag.test()``: the example's job into ``tables/events``.

dag_run.conf keys: repository, input_ref, day, rerun, rows, prefix (the templated output prefix of
``lf_delta_replace_templated``). The Spark connection ``spark_local`` is ``local[2]`` (tests/conftest.py).
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_lakefence.core.delta import DeltaTableOutput
from airflow_lakefence.delta import DELTA_SESSION_CONF, delta_package
from airflow_lakefence.operators import FencedSparkPublishOperator

HERE = Path(__file__).resolve().parent
JOB = str(HERE.parents[2] / "dags_examples" / "jobs" / "delta_events.py")
EVENTS = DeltaTableOutput("tables/events")

#: (dag_id, try_number) -> the exception a failed try raised; read by the tests.
FAILURES: dict[tuple[str, int], BaseException] = {}

SPARK_CONF = {
    **DELTA_SESSION_CONF,
    "spark.pyspark.python": sys.executable,
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.databricks.delta.properties.defaults.enableExpiredLogCleanup": "false",
    "spark.events.day": "{{ dag_run.conf['day'] }}",
    "spark.events.rerun": "{{ dag_run.conf.get('rerun', False) | string | lower }}",
    "spark.events.rows": "{{ dag_run.conf.get('rows', 1000) }}",
    # Which try wrote a row: a retry's rows are told from the abandoned publication's.
    "spark.events.tag": "run {{ dag_run.conf.get('tag', '') }} try {{ ti.try_number }}",
}


def _record_failure(context: Any) -> None:
    ti = context["ti"]
    FAILURES[(ti.dag_id, ti.try_number)] = context["exception"]


def _dag(dag_id: str, retries: int = 0) -> DAG:
    return DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        default_args={"retries": retries, "retry_delay": timedelta(0), "on_failure_callback": _record_failure},
    )


def _events(**kwargs: Any) -> FencedSparkPublishOperator:
    return FencedSparkPublishOperator(
        task_id="events",
        conn_id="spark_local",
        application=JOB,
        s3a=True,
        packages=delta_package(),
        conf=SPARK_CONF,
        env_vars={"SPARK_LOCAL_IP": "127.0.0.1"},
        repository="{{ dag_run.conf['repository'] }}",
        target_branch="main",
        input_ref="{{ dag_run.conf['input_ref'] }}",
        write_mode="direct",
        stale_grace_period=0,
        **kwargs,
    )


with _dag("lf_delta_events", retries=1) as events_dag:
    _events(output_tables=[EVENTS])

with _dag("lf_delta_events_once") as events_once_dag:
    _events(output_tables=[EVENTS])

with _dag("lf_delta_replace_templated") as replace_templated_dag:
    # The prefix is known only at run time: refused in the try, before any write.
    _events(output_tables=[EVENTS], output_prefixes=["{{ dag_run.conf['prefix'] }}"])
