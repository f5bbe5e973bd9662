"""The fenced job on a standalone Spark cluster (master + 1 worker on loopback, client deploy
mode): executors in their own JVMs read and write real lakeFS through S3A. Published objects and
row counts, Spark-level retries, Airflow-level replacement and fail-closed, and where the lakeFS
secret must not appear.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence import failpoints
from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.exceptions import PublishFenceError
from tests.integration.helpers import commit_files, die_after_publishing, staging_branches, ti_state, xcoms
from tests.spark.conftest import SparkCluster, parquet_rows, seed_events

pytestmark = [
    pytest.mark.spark,
    pytest.mark.spark_cluster,
    pytest.mark.s3a,
    pytest.mark.real_lakefs,
    pytest.mark.usefixtures("airflow_db", "lakefs_conn", "gateway_lakefs", "clean_failpoints"),
]

ROWS = 30_000


def _run(
    dags: Any, repo: lakefs.Repository, input_commit: str, tmp_path: Path, probe: dict[str, Any], dag: Any = None
) -> Any:
    (tmp_path / "events").mkdir(exist_ok=True)
    run_conf = {
        "repository": repo.id,
        "input_ref": input_commit,
        "event_log_dir": (tmp_path / "events").as_uri(),
        "probe": probe,
    }
    return (dag or dags.cluster_probe_dag).test(run_conf=run_conf)


def _assert_published(repo: lakefs.Repository, ref: str, files: int) -> None:
    paths, rows = parquet_rows(repo, ref, "tables/probe/")
    assert len(paths) == files, paths
    assert all(p.startswith("tables/probe/part-") and p.endswith(".parquet") for p in paths), paths
    assert rows == ROWS  # every input row once: no duplicate from a failed attempt


def test_cluster_publishes_despite_spark_retries_and_never_shows_the_secret(
    s3a_dags: Any,
    spark_cluster_conn: SparkCluster,
    lakefence_repo: lakefs.Repository,
    gateway_lakefs: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    secret = gateway_lakefs.secret_access_key
    input_commit = seed_events(lakefence_repo, ROWS)
    dump = tmp_path / "dump"
    probe = {"partitions": 3, "fail_first_job": True, "fail_first_attempt": True, "dump_dir": str(dump)}
    dr = _run(s3a_dags, lakefence_repo, input_commit, tmp_path, probe)
    output = "".join(capfd.readouterr())
    assert dr.state == "success", s3a_dags.FAILURES

    values = xcoms(dr, "publish")
    head = lakefence_repo.branch("main").get_commit()
    assert values["decision"] == "merge" and head.id == values["output_ref"]
    assert head.parents == [input_commit, values["staged_commit"]]
    # A failed Spark job and a failed task attempt, both after writing: only the 3 files of the
    # successful attempts reach the published commit.
    _assert_published(lakefence_repo, head.id, 3)
    assert staging_branches(lakefence_repo) == []
    assert "probe: first write failed as planned" in output
    # The failed job's task files and _temporary tree are gone (S3A keeps only an empty directory
    # marker, which the overwrite of the second write removes).
    assert "probe: files left by the failed write: []" in output
    # ...and the overwrite's delete of that marker made S3A create one for its parent: the job
    # helper removed it (otherwise "tables/" would fall outside output_prefixes: fail-closed).
    assert "probe: directory markers removed: ['tables/']" in output
    assert f"probe wrote {ROWS} rows in 3 files" in output

    # The task log (spark-submit's logged command and all job output).
    assert "Spark-Submit cmd:" in output and spark_cluster_conn.master_url in output
    assert secret not in output
    # The driver JVM's argv.
    cmdline = (dump / "driver_cmdline").read_bytes().decode(errors="replace")
    assert "org.apache.spark.deploy.SparkSubmit" in cmdline and secret not in cmdline
    # The live UI's REST API: the Hadoop configuration holds the lakeFS keys, redacted.
    environment = json.loads((dump / "environment.json").read_text())
    hadoop = dict(environment["hadoopProperties"])
    bucket = f"fs.s3a.bucket.{lakefence_repo.id}"
    assert hadoop[f"{bucket}.endpoint"] == gateway_lakefs.url
    assert hadoop[f"{bucket}.secret.key"] != secret and "redacted" in hadoop[f"{bucket}.secret.key"]
    assert secret not in (dump / "environment.json").read_text()
    # The event log, including the task failures Spark recovered from.
    app_id = (dump / "app_id").read_text()
    event_logs = [p for p in (tmp_path / "events").rglob("*") if p.is_file() and app_id in p.name]
    assert len(event_logs) == 1
    event_log = event_logs[0].read_text()
    assert f"{bucket}.secret.key" in event_log and "probe: failing task 0 attempt 0" in event_log
    assert secret not in event_log
    # Executors run in the worker's JVMs without the credentials in their environment: they got
    # them through the job's Hadoop configuration. Their launch commands and logs hold no secret.
    executor_env = json.loads((dump / "executor_env_names.json").read_text())
    assert "LAKEFS_SECRET_ACCESS_KEY" not in executor_env and "LAKEFS_ACCESS_KEY_ID" not in executor_env
    daemons = spark_cluster_conn.daemon_text()
    assert app_id in daemons and "CoarseGrainedExecutorBackend" in daemons
    assert secret not in daemons


def test_cluster_crash_after_publish_is_replaced_by_the_retry(
    s3a_dags: Any, spark_cluster_conn: SparkCluster, lakefence_repo: lakefs.Repository, tmp_path: Path
) -> None:
    input_commit = seed_events(lakefence_repo, ROWS)
    abandoned = die_after_publishing(lakefence_repo)
    dr = _run(s3a_dags, lakefence_repo, input_commit, tmp_path, {"partitions": 2})
    assert dr.state == "success", s3a_dags.FAILURES
    assert ti_state(dr, "publish") == ("success", 2)
    first = lakefence_repo.commit(abandoned[0]).get_commit()
    assert decode_metadata(first.metadata).attempt.try_number == 1  # type: ignore[union-attr]
    values = xcoms(dr, "publish")
    head = lakefence_repo.branch("main").get_commit()
    assert values["decision"] == "replace"
    assert head.id == values["output_ref"] == values["staged_commit"] != first.id
    # Replaced, not stacked: the retry's commit sits directly on the input.
    assert head.parents == [input_commit]
    assert [c.id for c in lakefence_repo.branch("main").log(max_amount=2)] == [head.id, input_commit]
    _assert_published(lakefence_repo, head.id, 2)
    assert staging_branches(lakefence_repo) == []


def test_cluster_fails_closed_when_the_target_moves_during_the_job(
    s3a_dags: Any, spark_cluster_conn: SparkCluster, lakefence_repo: lakefs.Repository, tmp_path: Path
) -> None:
    input_commit = seed_events(lakefence_repo, ROWS)
    foreign: list[str] = []

    def racer() -> None:
        if not foreign:
            foreign.append(commit_files(lakefence_repo, "main", {"other.txt": "x"}, "racer"))

    failpoints.arm("after_job", racer)
    # No Airflow retry: the one try's own failure and staging branch are what is asserted.
    dr = _run(s3a_dags, lakefence_repo, input_commit, tmp_path, {"partitions": 2}, s3a_dags.cluster_probe_once_dag)
    assert dr.state == "failed"
    error = s3a_dags.FAILURES[("lf_s3a_cluster_probe_once", 1)]
    assert type(error) is PublishFenceError
    assert lakefence_repo.branch("main").get_commit().id == foreign[0]
    # The staging branch the executors wrote is kept as evidence, with their output.
    assert error.staging_branch in staging_branches(lakefence_repo)
    marker = lakefence_repo.branch(error.staging_branch).get_commit()
    assert marker.metadata["lakefence.evidence"] == "PublishFenceError"
    _assert_published(lakefence_repo, marker.id, 2)
