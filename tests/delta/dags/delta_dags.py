"""DAGs of the Delta tier, run under ``dag.test()``: the example's job into ``tables/events``.

Two adapters run the same job code (``write_day`` of dags_examples/jobs/delta_events.py):

* ``FencedSparkPublishOperator``: every try is a ``spark-submit`` of the example's job, Delta's jar
  and hadoop-aws through ``--packages`` (a JVM per try: used where a try must die and be retried);
* ``FencedPythonPublishOperator``: the function writes through the test process's SparkSession
  (one JVM for the tier, tests/delta/conftest.py), pointed at the attempt's staging branch through
  the S3 gateway. The fenced protocol around it (staging branch, Delta check, publish fence) is the
  same engine.

dag_run.conf keys: repository, input_ref, day, rerun, rows, tag, repeat (how many times the
function repeats its write inside the try), table (the table root of the scoped DAG), prefix (the
templated output prefix of ``lf_delta_replace_templated``). The Spark connections: ``spark_local`` is
``local[2]`` (tests/conftest.py), ``spark_cluster`` a standalone master and worker (tests/spark/conftest.py).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from typing import Any

from airflow.providers.common.compat.sdk import DAG, Asset

from airflow_lakefence.core.staging.delta_tables import DeltaTableOutput
from airflow_lakefence.operators import FencedPythonPublishOperator, FencedSparkPublishOperator
from airflow_lakefence.spark.delta import DELTA_SESSION_CONF, delta_package, delta_table

# The one shared factory (tests/dags/dag_factory.py), by path: the dags folders are not packages.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dags"))
from dag_factory import failure_recording_dag

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


def _dag(dag_id: str, retries: int = 0) -> DAG:
    return failure_recording_dag(dag_id, FAILURES, retries, native=False)


def _events(conn_id: str = "spark_local", **kwargs: Any) -> FencedSparkPublishOperator:
    return FencedSparkPublishOperator(
        task_id="events",
        conn_id=conn_id,
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

with _dag("lf_delta_events_cluster") as events_cluster_dag:
    # The standalone cluster's executors write the data files; the driver commits the Delta log.
    _events("spark_cluster", output_tables=[EVENTS])

with _dag("lf_delta_replace_templated") as replace_templated_dag:
    # The prefix is known only at run time: refused in the try, before any write.
    _events(output_tables=[EVENTS], output_prefixes=["{{ dag_run.conf['prefix'] }}"])


def _example_job() -> Any:
    """dags_examples/jobs/delta_events.py as a module (imported in the try: it needs pyspark)."""
    name = "lakefence_example_delta_events_job"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, JOB)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


def write_events(
    lakefence: Any, table: str, day: str, rerun: str, rows: str, tag: str, repeat: str = "1"
) -> list[str]:
    """The example job's write, on the attempt's staging branch, through the process's SparkSession.

    ``repeat`` > 1 repeats the whole write inside the try, as a driver re-run by a cluster manager
    would: Delta's txn options (per attempt) make the repetitions commit nothing.
    """
    from pyspark.sql import SparkSession

    from airflow_lakefence.spark import configure_s3a

    spark = SparkSession.builder.getOrCreate()  # the tier's session: one JVM for every try
    # The Python adapter's locations build lakefs:// URIs; Spark writes through the S3 gateway.
    locations = dataclasses.replace(lakefence.locations, scheme="s3a")
    options = lakefence.storage_options
    configure_s3a(
        spark, locations, {"LAKEFS_ACCESS_KEY_ID": options["username"], "LAKEFS_SECRET_ACCESS_KEY": options["password"]}
    )
    events = delta_table(table, locations)
    job = _example_job()
    return [job.write_day(spark, events, day, rerun == "True", int(rows), tag) for _ in range(int(repeat))]


_PY_KWARGS = {
    "day": "{{ dag_run.conf['day'] }}",
    "rerun": "{{ dag_run.conf.get('rerun', False) }}",
    "rows": "{{ dag_run.conf.get('rows', 200) }}",
    "tag": "run {{ dag_run.conf.get('tag', '') }} try {{ ti.try_number }}",
    "repeat": "{{ dag_run.conf.get('repeat', 1) }}",
}


#: The repository of ``lf_delta_py_story``: an outlet's URI names its repository at parse time.
STORY_REPOSITORY = "lakefence-delta-story"


def _py_events(table: str, **kwargs: Any) -> FencedPythonPublishOperator:
    return FencedPythonPublishOperator(
        task_id="events",
        python_callable=write_events,
        op_kwargs={"table": table, **_PY_KWARGS},
        repository="{{ dag_run.conf['repository'] }}",
        target_branch="main",
        input_ref="{{ dag_run.conf['input_ref'] }}",
        write_mode="direct",
        output_tables=[table],
        stale_grace_period=0,
        **kwargs,
    )


with _dag("lf_delta_py_events") as py_events_dag:
    _py_events(EVENTS.root)

with _dag("lf_delta_py_story") as py_story_dag:
    # The table as an outlet: its asset events name the published commit and the Delta version.
    _py_events(EVENTS.root, outlets=[Asset(f"lakefs://{STORY_REPOSITORY}/main/{EVENTS.root}")])

with _dag("lf_delta_py_scoped") as py_scoped_dag:
    # The scoped fence: the table root is the write set (no output prefixes).
    _py_events("{{ dag_run.conf['table'] }}", fence_scope="prefixes")
