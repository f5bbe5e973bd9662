"""The job-side Delta helper (airflow_lakefence.spark.delta): locations, idempotent-write ids, packages."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_lakefence.core.names.locations import AttemptLocations
from airflow_lakefence.core.staging.delta_tables import DeltaTableOutput
from airflow_lakefence.spark import JobEnvironmentError
from airflow_lakefence.spark.delta import (
    DELTA_SESSION_CONF,
    delta_package,
    delta_submit_options,
    delta_table,
    txn_app_id,
    with_delta,
)

STAGING = "lakefence-events_daily-0123456789abcdef-t2-89abcdef"
ENV = {
    "LAKEFS_ENDPOINT": "http://127.0.0.1:8000/api/v1",
    "LAKEFENCE_REPOSITORY": "lake",
    "LAKEFENCE_INPUT_COMMIT": "c" * 64,
    "LAKEFENCE_STAGING_BRANCH": STAGING,
    "LAKEFENCE_WRITE_MODE": "direct",
}


def test_the_table_is_on_the_staging_branch_and_read_at_the_input_commit() -> None:
    table = delta_table("tables/events/", environ=ENV)
    assert table.uri == f"s3a://lake/{STAGING}/tables/events"
    assert table.input_uri == f"s3a://lake/{'c' * 64}/tables/events"


def test_workspace_mode_is_refused_because_delta_would_start_a_new_table(tmp_path: Path) -> None:
    locations = AttemptLocations(
        repository="lake",
        target_branch=None,
        input_commit="c" * 64,
        staging_branch=STAGING,
        workspace=tmp_path,
        write_mode="workspace",
        endpoint="http://x",
    )
    with pytest.raises(JobEnvironmentError, match="needs write_mode='direct'"):
        _ = delta_table(DeltaTableOutput("tables/events"), locations).uri


def test_outside_a_fenced_attempt_it_says_so() -> None:
    with pytest.raises(JobEnvironmentError, match="not started by FencedSparkPublishOperator"):
        delta_table("tables/events", environ={})


def test_write_options_are_per_attempt_per_table_and_per_write() -> None:
    table = delta_table("tables/events", environ=ENV)
    options = table.write_options("day-2026-11-03")
    assert options == table.write_options("day-2026-11-03")  # the same write again: skipped by Delta
    assert options["txnVersion"] == "0" and options["txnAppId"].startswith(f"lakefence-{STAGING}-")
    ids = {
        options["txnAppId"],
        table.write_options("day-2026-11-04")["txnAppId"],
        delta_table("tables/users", environ=ENV).write_options("day-2026-11-03")["txnAppId"],
        txn_app_id(STAGING.replace("-t2-", "-t3-"), "tables/events", "day-2026-11-03"),  # the next try
    }
    assert len(ids) == 4
    assert table.write_options("day", version=3)["txnVersion"] == "3"
    with pytest.raises(ValueError, match="negative"):
        table.write_options("day", version=-1)
    with pytest.raises(ValueError, match="non-empty name"):
        table.write_options("")


@pytest.mark.parametrize(
    ("delta", "spark", "coordinate"),
    [
        ("4.0.0", "4.0.1", "io.delta:delta-spark_2.13:4.0.0"),
        ("4.2.0", "4.1.1", "io.delta:delta-spark_4.1_2.13:4.2.0"),
        ("4.4.1", "4.2.0", "io.delta:delta-spark_4.2_2.13:4.4.1"),
    ],
)
def test_delta_package_follows_delta_spark_s_naming(delta: str, spark: str, coordinate: str) -> None:
    assert delta_package(delta, spark) == coordinate


def test_submit_options_add_delta_and_hadoop_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("airflow_lakefence.spark.delta.delta_package", lambda: "io.delta:delta-spark_4.1_2.13:4.2.0")
    options = delta_submit_options(conf={"spark.sql.shuffle.partitions": "8"}, packages="org.example:x:1")
    packages = options.packages.split(",")
    assert packages[:2] == ["org.example:x:1", "io.delta:delta-spark_4.1_2.13:4.2.0"]
    assert packages[2].startswith("org.apache.hadoop:hadoop-aws:")
    assert options.conf["spark.sql.extensions"] == DELTA_SESSION_CONF["spark.sql.extensions"]
    assert options.conf["spark.sql.shuffle.partitions"] == "8" and options.conf["spark.lakefence.s3a"] == "true"


def test_with_delta_sets_the_session_confs() -> None:
    class Builder:
        def __init__(self) -> None:
            self.conf: dict[str, str] = {}

        def config(self, key: str, value: str) -> Builder:
            self.conf[key] = value
            return self

    assert with_delta(Builder()).conf == dict(DELTA_SESSION_CONF)
