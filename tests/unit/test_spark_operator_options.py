"""The fenced Spark operator's S3A and Kubernetes options: what they add to spark-submit, and parse-time errors."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_lakefence.exceptions import InvalidInputError
from airflow_lakefence.operators import FencedSparkPublishOperator
from airflow_lakefence.spark import S3A_CONF, S3AConfigError, hadoop_aws_coordinate


def _operator(**kwargs: Any) -> FencedSparkPublishOperator:
    return FencedSparkPublishOperator(
        task_id="publish",
        application="job.py",
        repository="lake",
        target_branch="main",
        input_ref="c" * 64,
        **kwargs,
    )


def test_a_pinned_hadoop_aws_of_another_version_fails_at_parse_time() -> None:
    with pytest.raises(S3AConfigError, match="must match it exactly"):
        _operator(s3a=True, packages="org.apache.hadoop:hadoop-aws:3.3.4")


def test_a_bad_kubernetes_secret_name_fails_at_parse_time() -> None:
    with pytest.raises(InvalidInputError, match="not a valid Kubernetes Secret name"):
        _operator(kubernetes_credentials_secret="Not_A_Name")


def test_s3a_adds_the_matching_hadoop_aws_only_while_the_job_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_execute(self: FencedSparkPublishOperator, context: Any) -> None:
        seen["packages"], seen["conf"] = self.packages, dict(self.conf or {})

    op = _operator(s3a=True, packages="io.delta:delta-spark_2.13:4.0.0", kubernetes_credentials_secret="lakefs-creds")
    monkeypatch.setattr(op, "_spark_master", lambda: "k8s://https://cluster:6443")
    monkeypatch.setattr(
        "airflow.providers.apache.spark.operators.spark_submit.SparkSubmitOperator.execute", fake_execute
    )
    locations = type(
        "L",
        (),
        {
            "repository": "lake",
            "input_commit": "c" * 64,
            "target_branch": "main",
            "write_mode": "direct",
            "staging_branch": "stg",
            "workspace": None,
        },
    )()
    monkeypatch.setattr(op, "job_environment", lambda loc: {"LAKEFENCE_REPOSITORY": "lake"})
    op.run_job({}, locations)  # type: ignore[arg-type]

    assert seen["packages"] == f"io.delta:delta-spark_2.13:4.0.0,{hadoop_aws_coordinate()}"
    assert seen["conf"][S3A_CONF] == "true"
    assert (
        seen["conf"]["spark.kubernetes.driver.secretKeyRef.LAKEFS_SECRET_ACCESS_KEY"]
        == "lakefs-creds:secret_access_key"
    )
    # Restored after the job: the DAG's own arguments are not rewritten for the next try.
    assert op.packages == "io.delta:delta-spark_2.13:4.0.0"
    assert op.conf is None or S3A_CONF not in op.conf
