"""Probe job of the S3A / cluster tier: the example's read and write, plus what the tests inspect.

Spec (JSON in ``LAKEFENCE_PROBE``):

- ``partitions``: output files to write (default 3).
- ``fail_first_job``: the first write fails in every attempt of every task (a failed Spark job
  inside the application), then the job writes again.
- ``fail_first_attempt``: attempt 0 of partition 0 fails after producing all its rows (a task
  retry inside Spark).
- ``dump_dir``: write there the driver JVM's argv, the live UI's REST environment and the
  executors' environment variable names (for the credential assertions).
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession

from airflow_lakefence.spark import lakefence_spark_session

INPUT = "events/"
OUTPUT = "tables/probe/"
_FAIL_ALL = "lakefence.probe.failAll"
_FAIL_FIRST = "lakefence.probe.failFirst"


def _maybe_fail(rows: Iterator[object]) -> Iterator[object]:
    ctx = TaskContext.get()
    yield from rows
    # Failing after the last row: the attempt's file is complete and uploaded before the abort.
    if ctx is not None and (
        ctx.getLocalProperty(_FAIL_ALL) == "1"
        or (ctx.getLocalProperty(_FAIL_FIRST) == "1" and ctx.partitionId() == 0 and ctx.attemptNumber() == 0)
    ):
        raise RuntimeError(f"probe: failing task {ctx.partitionId()} attempt {ctx.attemptNumber()}")


def _executor_env(_: Iterator[object]) -> Iterator[str]:
    yield json.dumps(sorted(os.environ))


def _files_under(spark: SparkSession, uri: str) -> list[str]:
    """The files (not directory markers) under ``uri``, through the job's Hadoop FileSystem."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    found: list[str] = []
    if fs.exists(path):
        files = fs.listFiles(path, True)
        while files.hasNext():
            found.append(str(files.next().getPath().toString()))
    return found


def main() -> None:
    spec = json.loads(os.environ.get("LAKEFENCE_PROBE") or "{}")
    with lakefence_spark_session("lakefence-probe") as job:
        spark = job.spark
        assert job.s3a, "the probe needs S3A"
        sc = spark.sparkContext
        if spec.get("fail_first_attempt"):
            sc.setLocalProperty(_FAIL_FIRST, "1")
        events = spark.read.parquet(job.input_uri(INPUT))
        partitions = int(spec.get("partitions", 3))

        def write() -> DataFrame:
            out = spark.createDataFrame(events.repartition(partitions).rdd.mapPartitions(_maybe_fail), events.schema)
            out.write.mode("overwrite").parquet(job.output_uri(OUTPUT))
            return out

        if spec.get("fail_first_job"):
            sc.setLocalProperty(_FAIL_ALL, "1")
            try:
                write()
            except Exception as exc:
                print(f"probe: first write failed as planned ({type(exc).__name__})")
            else:
                raise SystemExit("probe: the first write should have failed")
            sc.setLocalProperty(_FAIL_ALL, None)
            print(f"probe: files left by the failed write: {_files_under(spark, job.output_uri(OUTPUT))}")
        write()
        print(f"probe: directory markers removed: {job.remove_directory_markers()}")
        written = spark.read.parquet(job.output_uri(OUTPUT)).count()
        print(f"probe wrote {written} rows in {partitions} files from input commit {job.locations.input_commit}")
        if spec.get("dump_dir"):
            dump = Path(spec["dump_dir"])
            dump.mkdir(parents=True, exist_ok=True)
            # An environment update after configure_s3a: the event log and the UI now hold the
            # Hadoop configuration with the lakeFS options in it.
            sc.addFile(__file__)
            (dump / "driver_cmdline").write_bytes(Path(f"/proc/{os.getppid()}/cmdline").read_bytes())
            url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/environment"
            with urllib.request.urlopen(url, timeout=30) as response:
                (dump / "environment.json").write_bytes(response.read())
            names = sc.parallelize([0], 1).mapPartitions(_executor_env).collect()
            (dump / "executor_env_names.json").write_text(names[0])
            (dump / "app_id").write_text(sc.applicationId)


if __name__ == "__main__":
    main()
