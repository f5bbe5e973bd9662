"""Example: a Delta Lake table published into lakeFS by a fenced PySpark job (docs/delta.md).

resolve the input once -> fenced PySpark job writing the Delta table ``tables/events``.

The scheduled run appends its day (``{{ ds }}``); a re-run of a past day is triggered with the
conf ``{"day": "2026-11-02", "rerun": true}`` and rewrites that day only (``replaceWhere``).
Either way the publication is one Delta version on from the table's version at the input commit:
the fence checks the staged log before publishing and reports the version (XCom
``delta_versions``, the asset event, OpenLineage). A retry after a worker died having published
replaces that publication: the table's log keeps one version for the run, the retry's.

Needs a real lakeFS (its S3 gateway), delta-spark on the workers (``pip install delta-spark``:
4.2.0 with PySpark 4.1.1, see docs/delta.md) and Spark able to fetch Maven packages. The
repository name comes from ``LAKEFENCE_EXAMPLE_REPOSITORY``.
"""

from __future__ import annotations

# [START lakefence_delta_example]
import os
import sys
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.providers.common.compat.sdk import DAG, Asset

from airflow_lakefence.core.staging.delta_tables import DeltaTableOutput
from airflow_lakefence.operators import FencedSparkPublishOperator, LakeFSResolveRefOperator, PublishOptions
from airflow_lakefence.spark import JobEnvironmentError
from airflow_lakefence.spark.delta import DELTA_SESSION_CONF, delta_package

REPOSITORY = os.environ.get("LAKEFENCE_EXAMPLE_REPOSITORY", "example-repo")
TARGET = "main"
EVENTS = DeltaTableOutput("tables/events")
try:
    # Delta's jar for the installed delta-spark and PySpark (delta-spark names it per Spark minor).
    DELTA_JAR = delta_package()
except JobEnvironmentError:
    # Parsed where delta-spark is not installed (a scheduler): the workers' pair, pinned.
    DELTA_JAR = delta_package("4.2.0", "4.1.1")

with DAG(
    "lakefence_example_delta_events",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    params={"day": None, "rerun": False, "rows": 1000, "tag": ""},
    tags=["lakefence", "example", "delta"],
) as dag:
    resolve_input = LakeFSResolveRefOperator(
        task_id="resolve_input",
        repository=REPOSITORY,
        ref=TARGET,
        depends_on_past=True,
        wait_for_downstream=True,
    )

    events = FencedSparkPublishOperator(
        task_id="events",
        application=str(Path(__file__).parent / "jobs" / "delta_events.py"),
        repository=REPOSITORY,
        target_branch=TARGET,
        input_ref=resolve_input.output,
        # Delta appends to the table's log where it lies: the job writes into its staging branch.
        write_mode="direct",
        s3a=True,  # adds hadoop-aws matching Spark's Hadoop, and S3A through the lakeFS gateway
        packages=DELTA_JAR,
        output_tables=[EVENTS],
        commit_message="events {{ params.day or ds }}, run {{ run_id }}",
        # The table as an asset: its events carry the published commit and Delta version.
        outlets=[Asset(f"lakefs://{REPOSITORY}/{TARGET}/{EVENTS.root}")],
        depends_on_past=True,
        pool=f"lakefs_{REPOSITORY}_{TARGET}",
        retries=2,
        retry_delay=timedelta(seconds=10),
        execution_timeout=timedelta(minutes=30),
        options=PublishOptions(publish_budget=timedelta(minutes=2)),
        conf={
            **DELTA_SESSION_CONF,
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.pyspark.python": sys.executable,
            "spark.events.day": "{{ params.day or ds }}",
            "spark.events.rerun": "{{ params.rerun | string | lower }}",
            "spark.events.rows": "{{ params.rows }}",
            "spark.events.tag": "{{ params.tag }}",
            # Keep every log entry: each lakeFS commit keeps its own history, and the fence refuses
            # a publication that removes earlier log entries (Delta's expired-log clean-up).
            "spark.databricks.delta.properties.defaults.enableExpiredLogCleanup": "false",
        },
    )

    resolve_input >> events
# [END lakefence_delta_example]
