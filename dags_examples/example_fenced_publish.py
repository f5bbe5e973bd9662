"""Example: a daily aggregate published into lakeFS by a fenced PySpark job.

fenced PySpark job (its input: main, pinned once per run) -> a downstream task that reads the published commit.

Run it end to end on this machine with ``tox -e demo`` (local Spark, SQLite, the project's local
lakeFS server). The repository name comes from ``LAKEFENCE_EXAMPLE_REPOSITORY``.

``LAKEFENCE_EXAMPLE_S3A=1`` selects the S3A flavour for a real lakeFS: the job reads the pinned
input and writes its output with Spark through lakeFS's S3 gateway (direct mode). The embedded
default cannot: the local lakeFS-compatible server has no S3 gateway, so there the job reads the
input on the driver and writes a workspace the operator uploads.
"""

from __future__ import annotations

# [START lakefence_example]
import os
import sys
from datetime import timedelta
from pathlib import Path

import pendulum

# Through common-compat, as the official providers import Airflow: this file runs on Airflow 2.11 to 3.3.
from airflow.providers.common.compat.sdk import DAG, Asset, task

from airflow_lakefence.operators import FencedSparkPublishOperator, PublishOptions
from airflow_lakefence.sensors import AbandonedPublicationSensor

REPOSITORY = os.environ.get("LAKEFENCE_EXAMPLE_REPOSITORY", "example-repo")
TARGET = "main"
OUTPUT_PREFIX = "tables/daily_counts/"
S3A = os.environ.get("LAKEFENCE_EXAMPLE_S3A") == "1"
# Downstream DAGs scheduled on this Asset get an event per publication, with the exact commit.
DAILY_COUNTS = Asset(f"lakefs://{REPOSITORY}/{TARGET}/{OUTPUT_PREFIX}")

with DAG(
    "lakefence_example_daily_counts",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["lakefence", "example"],
) as dag:
    publish = FencedSparkPublishOperator(
        task_id="daily_counts",
        application=str(Path(__file__).parent / "jobs" / "daily_counts.py"),
        repository=REPOSITORY,
        # Also the input: the first try of a run pins main's HEAD, and every retry builds on that commit.
        target_branch=TARGET,
        output_prefixes=[OUTPUT_PREFIX],
        # S3A: Spark writes into the attempt's staging branch itself; else a workspace is uploaded.
        write_mode="direct" if S3A else "workspace",
        s3a=S3A,
        # run_id, not ds: a run triggered without a logical date (the REST API default) has no ds.
        commit_message="daily counts, run {{ run_id }}",
        commit_metadata={"pipeline": "daily_counts"},
        outlets=[DAILY_COUNTS],
        # One writer per target branch: the operator lets one try of this DAG run at a time; every
        # DAG that publishes into main also shares this 1-slot pool.
        pool=f"lakefs_{REPOSITORY}_{TARGET}",
        retries=2,
        retry_delay=timedelta(seconds=10),
        execution_timeout=timedelta(minutes=30),
        options=PublishOptions(publish_budget=timedelta(minutes=2)),
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.pyspark.python": sys.executable,
            # No _SUCCESS file in the output.
            "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
            # No .crc files in the workspace (S3A buffers uploads through the checksummed local FS).
            **({} if S3A else {"spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem"}),
        },
    )

    @task
    def report(output_ref: str, input_ref: str) -> dict[str, int]:
        """Read the published table at the exact commit the fenced task reported, and check that it
        counts exactly the input's events (a re-run that stacked part files would count them twice)."""
        import pyarrow.parquet as pq
        from lakefs_spec import LakeFSFileSystem

        from airflow_lakefence.hooks.lakefs import LakeFSHook

        hook = LakeFSHook()
        env = hook.credentials_env()
        fs = LakeFSFileSystem(
            host=hook.endpoint,
            username=env["LAKEFS_ACCESS_KEY_ID"],
            password=env["LAKEFS_SECRET_ACCESS_KEY"],
        )
        table = pq.read_table(f"{REPOSITORY}/{output_ref}/{OUTPUT_PREFIX}", filesystem=fs)
        counts = {str(row["day"]): int(row["events"]) for row in table.to_pylist()}
        print(f"published commit {output_ref}: {len(counts)} days, {sum(counts.values())} events")
        events = pq.read_table(f"{REPOSITORY}/{input_ref}/events/", filesystem=fs).num_rows
        if sum(counts.values()) != events:
            raise ValueError(f"published {sum(counts.values())} events, but input commit {input_ref} holds {events}")
        return counts

    # Readers wait until main is settled: its HEAD is not a publication whose try died (or is
    # still completing) before Airflow recorded its success. See docs/abandoned-publications.md.
    main_settled = AbandonedPublicationSensor(
        task_id="main_settled",
        repository=REPOSITORY,
        branch=TARGET,
        condition="settled",
        mode="reschedule",
        poke_interval=30,
        timeout=timedelta(hours=1),
    )

    publish >> main_settled >> report(publish.output, publish.output["input_ref"])
# [END lakefence_example]
