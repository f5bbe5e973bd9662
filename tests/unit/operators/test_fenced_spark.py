"""The fenced Spark operator's S3A and Kubernetes options: what they add to spark-submit, and parse-time errors."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

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


def test_s3a_and_the_secret_reach_the_hook_and_the_tasks_own_arguments_never_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The provider's execute builds its hook with ``_get_hook`` (the upstream behaviour relied on):
    the hook gets the attempt's packages and confs while the task's ``conf``, ``env_vars`` and
    ``packages`` stay the very objects the DAG passed, during the job and after it."""
    conf, env_vars = {"spark.ui.enabled": "false"}, {"TZ": "UTC"}
    op = _operator(
        s3a=True,
        packages="io.delta:delta-spark_2.13:4.0.0",
        kubernetes_credentials_secret="lakefs-creds",
        conf=conf,
        env_vars=env_vars,
    )
    seen: dict[str, Any] = {}

    def submit(hook: SparkSubmitHook, application: str = "", **kwargs: Any) -> None:
        seen.update(packages=hook._packages, conf=dict(hook._conf), env=dict(hook._env_vars or {}), app=application)
        seen["task"] = (op.conf, op.env_vars, op.packages)

    monkeypatch.setattr(SparkSubmitHook, "submit", submit)
    monkeypatch.setattr(op, "_spark_master", lambda: "k8s://https://cluster:6443")
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

    assert seen["app"] == "job.py"
    assert seen["packages"] == f"io.delta:delta-spark_2.13:4.0.0,{hadoop_aws_coordinate()}"
    assert seen["conf"][S3A_CONF] == "true"
    assert seen["conf"]["spark.lakefence.repository"] == "lake"
    assert seen["conf"]["spark.ui.enabled"] == "false"
    assert (
        seen["conf"]["spark.kubernetes.driver.secretKeyRef.LAKEFS_SECRET_ACCESS_KEY"]
        == "lakefs-creds:secret_access_key"
    )
    assert seen["env"] == {"TZ": "UTC", "LAKEFENCE_REPOSITORY": "lake"}  # k8s: no credentials in the env
    # The task's own arguments while the job ran, and after: the DAG's, unchanged.
    assert seen["task"][0] is conf and seen["task"][1] is env_vars and seen["task"][2] == op.packages
    assert op.conf == {"spark.ui.enabled": "false"} and op.env_vars == {"TZ": "UTC"}
    assert op.packages == "io.delta:delta-spark_2.13:4.0.0"
    assert op._hook is None  # the hook (and what it was given) does not outlive the job
