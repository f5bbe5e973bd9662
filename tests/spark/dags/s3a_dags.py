"""DAGs of the S3A / Spark-cluster tier, run under ``dag.test()``.

dag_run.conf keys: repository, input_ref, event_log_dir, probe (the probe job's spec, JSON).
The Spark connections: ``spark_local`` (``local[2]``, tests/conftest.py) and ``spark_cluster``
(the session's standalone master, set by tests/spark/conftest.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from airflow.providers.common.compat.sdk import DAG

from airflow_lakefence.operators import FencedSparkPublishOperator

# The one shared factory (tests/dags/dag_factory.py), by path: the dags folders are not packages.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dags"))
from dag_factory import failure_recording_dag

HERE = Path(__file__).resolve().parent
EXAMPLE_JOB = str(HERE.parents[2] / "dags_examples" / "jobs" / "daily_counts.py")
PROBE_JOB = str(HERE.parent / "jobs" / "probe_job.py")

#: (dag_id, try_number) -> the exception a failed try raised; read by the tests.
FAILURES: dict[tuple[str, int], BaseException] = {}


def _dag(dag_id: str, retries: int = 0) -> DAG:
    return failure_recording_dag(dag_id, FAILURES, retries, native=False)


# What a DAG author writes for S3A: `s3a=True` and the job's own tuning, nothing about endpoints,
# keys or the hadoop-aws coordinate.
SPARK_CONF = {
    "spark.pyspark.python": sys.executable,
    "spark.sql.shuffle.partitions": "2",
    "spark.log.level": "WARN",
    "spark.driver.host": "127.0.0.1",
    "spark.executor.memory": "512m",
    # The probes read the live UI's REST API and the event log.
    "spark.ui.enabled": "true",
    "spark.ui.port": "0",
    "spark.eventLog.enabled": "true",
    "spark.eventLog.dir": "{{ dag_run.conf['event_log_dir'] }}",
    # Plain JSON lines, so the tests can search the file for the secret.
    "spark.eventLog.compress": "false",
    "spark.eventLog.rolling.enabled": "false",
    # One retry per task inside Spark: the probe's failing first attempts get a second one.
    "spark.task.maxFailures": "2",
}



def _fenced(conn_id: str, application: str, write_mode: str, output_prefix: str) -> FencedSparkPublishOperator:
    return FencedSparkPublishOperator(
        task_id="publish",
        conn_id=conn_id,
        application=application,
        s3a=True,
        conf=SPARK_CONF,
        env_vars={"SPARK_LOCAL_IP": "127.0.0.1", "LAKEFENCE_PROBE": "{{ dag_run.conf.get('probe', {}) | tojson }}"},
        repository="{{ dag_run.conf['repository'] }}",
        target_branch="main",
        input_ref="{{ dag_run.conf['input_ref'] }}",
        write_mode=write_mode,
        output_prefixes=[output_prefix],
        stale_grace_period=0,
    )


with _dag("lf_s3a_example_direct") as example_direct_dag:
    _fenced("spark_local", EXAMPLE_JOB, "direct", "tables/daily_counts/")

with _dag("lf_s3a_example_workspace") as example_workspace_dag:
    _fenced("spark_local", EXAMPLE_JOB, "workspace", "tables/daily_counts/")

with _dag("lf_s3a_cluster_probe", retries=1) as cluster_probe_dag:
    _fenced("spark_cluster", PROBE_JOB, "direct", "tables/probe/")

with _dag("lf_s3a_cluster_probe_once") as cluster_probe_once_dag:
    _fenced("spark_cluster", PROBE_JOB, "direct", "tables/probe/")
