"""Example: a branch per run, published once (docs/howto/branch-per-run.md).

Two DAGs in the shape of treeverse's airflow-01 samples, made safe to retry:

* ``lakefence_example_branch_per_run`` wraps an existing DAG: it makes the run's branch, triggers
  ``lakefence_example_existing_etl`` to write into it (``TriggerDagRunOperator`` with
  ``wait_for_completion``), then publishes the run branch into ``main`` with the fenced protocol;
* ``lakefence_example_spark_run_branch`` runs a fenced PySpark job on the run branch, then publishes it.

The existing DAG needs one change: its fenced task publishes into the branch it is given
(``dag_run.conf["run_branch"]``) instead of ``main``. The repository name comes from
``LAKEFENCE_EXAMPLE_REPOSITORY``; ``dags_examples/run_demo.py`` seeds its ``events/`` table.
"""

from __future__ import annotations

# [START lakefence_branch_per_run_example]
import csv
import io
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import DAG, task
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator

from airflow_lakefence.operators import FencedSparkPublishOperator
from airflow_lakefence.operators.run_branch import LakeFSPublishRunOperator, LakeFSRunBranchOperator

REPOSITORY = os.environ.get("LAKEFENCE_EXAMPLE_REPOSITORY", "example-repo")
TARGET = "main"
START = pendulum.datetime(2026, 1, 1, tz="UTC")

# The existing DAG: its fenced task writes into the run branch the wrapper hands it.
with DAG("lakefence_example_existing_etl", schedule=None, start_date=START, catchup=False) as existing_etl:

    @task.lakefs_publish(
        repository=REPOSITORY,
        target_branch="{{ dag_run.conf['run_branch'] }}",
        input_ref="{{ dag_run.conf['run_branch'] }}",
        output_prefixes=["tables/events_per_day/"],
        retries=2,
    )
    def events_per_day(lakefence: Any) -> None:
        """Count the input's events per day into ``tables/events_per_day/counts.csv``."""
        import pyarrow.parquet as pq

        data = lakefence.client.read_object(lakefence.repository, lakefence.input_commit, "events/part-00000.parquet")
        counts: dict[str, int] = {}
        for day in pq.read_table(io.BytesIO(data)).column("day").to_pylist():
            counts[day] = counts.get(day, 0) + 1
        out = lakefence.workspace / "tables" / "events_per_day" / "counts.csv"
        out.parent.mkdir(parents=True)
        with out.open("w", newline="") as fd:
            csv.writer(fd).writerows(sorted(counts.items()))

    events_per_day()

# The wrapper: a branch for the run, the existing DAG writing into it, one fenced publication.
with DAG(
    "lakefence_example_branch_per_run",
    schedule=None,
    start_date=START,
    catchup=False,
    max_active_runs=1,  # branch-wide publish fence: one run publishes into main at a time
    tags=["lakefence", "example"],
) as dag:
    run_branch = LakeFSRunBranchOperator(task_id="run_branch", repository=REPOSITORY, source_ref=TARGET)
    etl = TriggerDagRunOperator(
        task_id="existing_etl",
        trigger_dag_id="lakefence_example_existing_etl",
        conf={"run_branch": "{{ ti.xcom_pull(task_ids='run_branch') }}"},
        wait_for_completion=True,
        poke_interval=2,
        allowed_states=["success"],
        failed_states=["failed"],
    )
    publish = LakeFSPublishRunOperator(
        task_id="publish",
        repository=REPOSITORY,
        run_branch=run_branch.output,
        target_branch=TARGET,
        input_ref=run_branch.input_commit,
        output_prefixes=["tables/events_per_day/"],
        commit_message="events per day, run {{ run_id }}",
        retries=2,
    )
    run_branch >> etl >> publish

# A fenced Spark job on the run branch, then the run's publication.
with DAG(
    "lakefence_example_spark_run_branch",
    schedule=None,
    start_date=START,
    catchup=False,
    max_active_runs=1,
    tags=["lakefence", "example"],
) as spark_dag:
    spark_branch = LakeFSRunBranchOperator(task_id="run_branch", repository=REPOSITORY, source_ref=TARGET)
    daily_counts = FencedSparkPublishOperator(
        task_id="daily_counts",
        application=str(Path(__file__).parent / "jobs" / "daily_counts.py"),
        conn_id="spark_default",
        repository=REPOSITORY,
        target_branch=spark_branch.output,  # the run branch, not main
        input_ref=spark_branch.output,
        output_prefixes=["tables/daily_counts/"],
        retries=2,
        execution_timeout=timedelta(minutes=30),
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.pyspark.python": sys.executable,
            "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
            "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
        },
    )
    LakeFSPublishRunOperator(
        task_id="publish",
        repository=REPOSITORY,
        run_branch=spark_branch.output,
        target_branch=TARGET,
        input_ref=spark_branch.input_commit,
        output_prefixes=["tables/daily_counts/"],
        retries=2,
    ).set_upstream(daily_counts)
# [END lakefence_branch_per_run_example]
