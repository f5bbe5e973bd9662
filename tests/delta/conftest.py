"""Fixtures of the Delta tier: real PySpark (local mode) with Delta Lake, writing through real lakeFS's S3 gateway.

The tier runs in its own environment (``tox -e delta``): delta-spark pins the PySpark it works with,
which is not the main environment's. Without delta-spark the tier skips; on the local lakeFS test
server (no S3 gateway) too. Delta's jar and hadoop-aws come from Maven through ``spark.jars.packages``
(Ivy cache), set by delta-spark's own ``configure_spark_with_delta_pip``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DAGS_FOLDER, fresh_dag_module

# The standalone cluster of the Spark tier (a master and a worker from PySpark's launch classes).
from tests.spark.conftest import spark_cluster, spark_cluster_conn  # noqa: F401

HERE = Path(__file__).resolve().parent
if not (DAGS_FOLDER / "deltadags").exists():
    (DAGS_FOLDER / "deltadags").symlink_to(HERE / "dags")


@pytest.fixture
def delta_dags() -> Any:
    """tests/delta/dags/delta_dags.py, with the failures of earlier tests forgotten."""
    return fresh_dag_module("deltadags/delta_dags.py")


@pytest.fixture
def gateway_lakefs(lakefence_server: Any) -> Any:
    """The session's lakeFS, if it serves the S3 gateway (a real lakeFS); skip otherwise."""
    if lakefence_server.is_local:
        pytest.skip("Delta through S3A needs the real lakeFS's S3 gateway (--lakefs-backend=real)")
    return lakefence_server


@pytest.fixture(scope="session")
def delta_spark() -> Iterator[Any]:
    """One local SparkSession with Delta and S3A for the tier (the JVM start dominates)."""
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    from airflow_lakefence.spark import COMMITTER_SETTINGS, hadoop_aws_coordinate
    from airflow_lakefence.spark.delta import with_delta

    started = time.monotonic()
    builder = with_delta(
        SparkSession.builder.master("local[2]")
        .appName("lakefence-delta-tier")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.log.level", "WARN")
        # Delta rebuilds a snapshot's state in 50 partitions by default: far too many for small tables.
        .config("spark.databricks.delta.snapshotPartitions", "2")
        # New tables checkpoint every 2 versions (default 10), so that the tests publish real
        # checkpoints and _last_checkpoint rewrites through the check.
        .config("spark.databricks.delta.properties.defaults.checkpointInterval", "2")
    )
    for key, value in COMMITTER_SETTINGS.items():
        builder = builder.config(f"spark.hadoop.{key}", value)
    spark = configure_spark_with_delta_pip(builder, extra_packages=[hadoop_aws_coordinate()]).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.lakefence_start_seconds = time.monotonic() - started  # type: ignore[attr-defined]
    try:
        yield spark
    finally:
        spark.stop()
