"""The job-side helper: locations from the environment the operator sets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_lakefence.spark import configure_s3a, lakefence_locations

ENV = {
    "LAKEFS_ENDPOINT": "http://lakefs:8000",
    "LAKEFENCE_REPOSITORY": "repo",
    "LAKEFENCE_INPUT_COMMIT": "c" * 64,
    "LAKEFENCE_STAGING_BRANCH": "lakefence-t-0123456789abcdef-t1-01234567",
}


def test_direct_mode_uris() -> None:
    loc = lakefence_locations({**ENV, "LAKEFENCE_WRITE_MODE": "direct"})
    assert loc.input_uri("/events/") == f"s3a://repo/{'c' * 64}/events/"
    assert loc.output_uri("out/") == "s3a://repo/lakefence-t-0123456789abcdef-t1-01234567/out/"
    assert (
        lakefence_locations({**ENV, "LAKEFENCE_WRITE_MODE": "direct"}, scheme="lakefs")
        .output_uri("x")
        .startswith("lakefs://repo/lakefence-")
    )
    with pytest.raises(RuntimeError, match="workspace mode"):
        loc.output_path("x")


def test_workspace_mode_paths(tmp_path: Path) -> None:
    loc = lakefence_locations({**ENV, "LAKEFENCE_WRITE_MODE": "workspace", "LAKEFENCE_WORKSPACE_DIR": str(tmp_path)})
    assert loc.output_path("a/b.parquet") == tmp_path / "a" / "b.parquet"
    assert loc.output_uri("a/") == (tmp_path / "a").as_uri()


def test_read_only_has_no_output() -> None:
    loc = lakefence_locations(
        {k: v for k, v in ENV.items() if k != "LAKEFENCE_STAGING_BRANCH"} | {"LAKEFENCE_WRITE_MODE": "read_only"}
    )
    assert loc.staging_branch is None
    with pytest.raises(RuntimeError, match="writes nothing"):
        loc.output_uri("x")


def test_not_started_by_the_operator() -> None:
    with pytest.raises(RuntimeError, match="LAKEFENCE_REPOSITORY"):
        lakefence_locations({"LAKEFS_ENDPOINT": "x", "LAKEFENCE_INPUT_COMMIT": "c"})
    with pytest.raises(ValueError):
        lakefence_locations(ENV, scheme="hdfs")


def test_configure_s3a_takes_credentials_from_the_environment() -> None:
    class Conf:
        def __init__(self) -> None:
            self.values: dict[str, str] = {}

        def set(self, key: str, value: str) -> None:
            self.values[key] = value

    conf = Conf()
    spark: Any = type(
        "S",
        (),
        {"sparkContext": type("C", (), {"_jsc": type("J", (), {"hadoopConfiguration": lambda self: conf})()})()},
    )()
    loc = lakefence_locations(ENV)
    configure_s3a(spark, loc, {"LAKEFS_ACCESS_KEY_ID": "k", "LAKEFS_SECRET_ACCESS_KEY": "s"})
    assert conf.values["fs.s3a.bucket.repo.endpoint"] == "http://lakefs:8000"
    assert conf.values["fs.s3a.bucket.repo.secret.key"] == "s"
    with pytest.raises(RuntimeError):
        configure_s3a(spark, loc, {})
