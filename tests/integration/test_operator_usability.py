"""What a DAG author sees (issue 17, operator side): runs without a logical date, the Spark job's
environment and confs through the provider's public arguments, and the attempt's log lines.
"""

from __future__ import annotations

from typing import Any

import jinja2
import lakefs
import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from tests.conftest import load_dag_module
from tests.integration.helpers import xcoms

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn")


def conf(repo: lakefs.Repository, input_ref: str, job: dict[str, Any]) -> dict[str, Any]:
    return {"repository": repo.id, "target": "main", "input_ref": input_ref, "job": job}


def test_the_example_commit_message_needs_no_logical_date() -> None:
    example = load_dag_module("examples/example_fenced_publish.py").dag
    task = example.get_task("daily_counts")
    env = example.get_template_env()
    context = {"run_id": "manual__2026-01-01T00:00:00+00:00"}  # what a run without logical date has
    assert task.render_template(task.commit_message, context, env) == f"daily counts, run {context['run_id']}"
    with pytest.raises(jinja2.UndefinedError):  # the check can fail: ds is undefined in that context
        task.render_template("daily counts for {{ ds }}", context, env)


def test_a_run_without_logical_date_publishes(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    dr = dags.py_message_dag.test(logical_date=None, run_conf=conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.logical_date is None
    assert dr.state == "success"
    head = repo.branch("main").get_commit()
    assert xcoms(dr, "publish")["output_ref"] == head.id
    assert head.message == f"published by run {dr.run_id}"


def observe_submits(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    submitted: list[dict[str, Any]] = []
    original = SparkSubmitHook.submit

    def observe(hook: SparkSubmitHook, application: str = "", **kwargs: Any) -> Any:
        command = hook._build_spark_submit_command(application)
        submitted.append({"argv": command, "env": dict(hook._env or {})})
        return original(hook, application, **kwargs)

    monkeypatch.setattr(SparkSubmitHook, "submit", observe)
    return submitted


def test_the_spark_job_gets_locations_as_env_and_confs_and_binds_locally(
    dags: Any, seeded: tuple[lakefs.Repository, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, input_commit = seeded
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    submitted = observe_submits(monkeypatch)
    dr = dags.workspace_dag.test(run_conf=conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success"
    staging = xcoms(dr, "publish")["staging_branch"]
    (call,) = submitted
    assert call["env"]["SPARK_LOCAL_IP"] == "127.0.0.1"  # spark_local is a local[2] master
    assert call["env"]["LAKEFENCE_STAGING_BRANCH"] == staging
    assert call["env"]["LAKEFENCE_INPUT_COMMIT"] == input_commit
    assert f"spark.lakefence.stagingBranch={staging}" in call["argv"]
    assert f"spark.lakefence.inputCommit={input_commit}" in call["argv"]
    # The operator's own arguments are unchanged after the try (credentials lived in it only while the job ran).
    task = dags.workspace_dag.get_task("publish")
    assert "LAKEFS_SECRET_ACCESS_KEY" not in task.env_vars


def test_an_explicit_spark_local_ip_is_kept(
    dags: Any, seeded: tuple[lakefs.Repository, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, input_commit = seeded
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.2")
    submitted = observe_submits(monkeypatch)
    assert dags.workspace_dag.test(run_conf=conf(repo, input_commit, {"files": {"out/a.txt": "A"}})).state == "success"
    assert "SPARK_LOCAL_IP" not in submitted[0]["env"]  # the process environment's value applies


def test_the_providers_openlineage_conf_injection_still_reaches_the_job(
    dags: Any, seeded: tuple[lakefs.Repository, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("airflow.providers.openlineage")
    repo, input_commit = seeded
    submitted = observe_submits(monkeypatch)
    dr = dags.openlineage_dag.test(run_conf=conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success"
    argv = submitted[0]["argv"]
    assert any(arg.startswith("spark.openlineage.parentJobName=") for arg in argv), argv
    assert any(arg.startswith("spark.lakefence.stagingBranch=") for arg in argv)
