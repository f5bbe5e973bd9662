"""What a DAG author sees of the operator: runs without a logical date, the Spark job's
environment and confs through the provider's public arguments, and the attempt's log lines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
import lakefs
import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_lakefence.core.engine import AttemptLocations
from airflow_lakefence.exceptions import InvalidInputError
from tests.conftest import load_dag_module
from tests.integration.helpers import attempt_and_summary, only, publish_conf, spark_task, ti_state, xcoms

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn")


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
    dr = dags.py_message_dag.test(
        logical_date=None, run_conf=publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}})
    )
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
    dr = dags.workspace_dag.test(run_conf=publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success"
    staging = xcoms(dr, "publish")["staging_branch"]
    (call,) = submitted
    assert call["env"]["SPARK_LOCAL_IP"] == "127.0.0.1"  # spark_local is a local[2] master
    assert call["env"]["LAKEFENCE_STAGING_BRANCH"] == staging
    assert call["env"]["LAKEFENCE_INPUT_COMMIT"] == input_commit
    assert f"spark.lakefence.stagingBranch={staging}" in call["argv"]
    assert f"spark.lakefence.inputCommit={input_commit}" in call["argv"]
    assert "spark.log.level=WARN" in call["argv"]  # Spark's INFO lines stay out of the task log
    # The operator's own arguments are unchanged after the try (credentials lived in it only while the job ran).
    task = dags.workspace_dag.get_task("publish")
    assert "LAKEFS_SECRET_ACCESS_KEY" not in task.env_vars


def test_an_explicit_spark_local_ip_is_kept(
    dags: Any, seeded: tuple[lakefs.Repository, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, input_commit = seeded
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.2")
    submitted = observe_submits(monkeypatch)
    assert (
        dags.workspace_dag.test(run_conf=publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}})).state
        == "success"
    )
    assert "SPARK_LOCAL_IP" not in submitted[0]["env"]  # the process environment's value applies


def test_the_providers_openlineage_conf_injection_still_reaches_the_job(
    dags: Any, seeded: tuple[lakefs.Repository, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("airflow.providers.openlineage")
    repo, input_commit = seeded
    submitted = observe_submits(monkeypatch)
    dr = dags.openlineage_dag.test(run_conf=publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success"
    argv = submitted[0]["argv"]
    assert any(arg.startswith("spark.openlineage.parentJobName=") for arg in argv), argv
    assert any(arg.startswith("spark.lakefence.stagingBranch=") for arg in argv)


@pytest.mark.parametrize("ui_base_url", [None, "https://lakefs.example.com/ui/"])
def test_the_task_log_tells_the_attempt_before_the_job_and_sums_it_up_after(
    dags: Any,
    seeded: tuple[lakefs.Repository, str],
    lakefs_conn: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    ui_base_url: str | None,
) -> None:
    repo, input_commit = seeded
    if ui_base_url is not None:
        monkeypatch.setenv(
            "AIRFLOW_CONN_LAKEFS_DEFAULT", json.dumps({**lakefs_conn, "extra": {"ui_base_url": ui_base_url}})
        )
    capfd.readouterr()
    dr = dags.workspace_dag.test(
        run_conf=publish_conf(repo, input_commit, {"files": {"out/a.txt": "A", "out/b.txt": "BB"}})
    )
    lines = "".join(capfd.readouterr()).splitlines()
    assert dr.state == "success"
    values = xcoms(dr, "publish")
    head = repo.branch("main").get_commit()
    assert values["decision"] == "merge" and values["output_ref"] == head.id

    summary_facts = (head.id, values["staged_commit"], f"input {input_commit}", "2 files, 3 bytes uploaded")
    attempt, summary = attempt_and_summary(lines, input_commit, values, summary_facts)
    assert attempt < only(lines, "Spark-Submit cmd:") < only(lines, "JOB-DONE workspace 2") < summary
    # The link under the connection's UI base URL when it has one, else under its endpoint.
    base = (ui_base_url or lakefs_conn["host"]).rstrip("/").removesuffix("/api/v1")
    assert only(lines, "lakeFS commit: ") == summary + 1
    assert f"lakeFS commit: {base}/repositories/{repo.id}/commits/{head.id}" in lines[summary + 1]


@pytest.mark.parametrize(
    ("kwargs", "level"),
    [
        ({}, "WARN"),
        ({"spark_log_level": "info"}, "INFO"),
        ({"spark_log_level": "ERROR", "conf": {"spark.log.level": "DEBUG"}}, "DEBUG"),  # conf wins
        ({"spark_log_level": None}, None),
    ],
)
def test_spark_log_level_reaches_the_job_unless_conf_or_none_says_otherwise(
    kwargs: dict[str, Any], level: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    confs: list[dict[str, Any]] = []
    # What the provider's execute does with the task: build its hook through _get_hook, submit with it.
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: confs.append(self._get_hook()._conf))
    task = spark_task(conn_id="spark_local", **kwargs)
    task.run_job({}, AttemptLocations("repo", "main", "c" * 64, "lakefence-x", Path("/nonexistent"), "workspace"))
    (submitted,) = confs
    assert submitted.get("spark.log.level") == level
    assert "spark.lakefence.stagingBranch" in submitted  # the job's confs were there too
    assert task.conf == kwargs.get("conf")  # the task's own conf is unchanged after the job


def test_a_spark_log_level_spark_does_not_know_is_refused_at_parse_time() -> None:
    with pytest.raises(InvalidInputError, match="spark_log_level must be one of"):
        spark_task(spark_log_level="VERBOSE")


def test_without_input_ref_the_first_try_pins_the_target_and_a_retry_builds_on_that_commit(
    dags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    """The default input is the target branch, resolved once per run: a retry after another writer
    moved the target still reads the first try's commit (so it fails closed instead of building on
    output it never saw); a new run builds on the new HEAD."""
    repo, input_commit = seeded
    conf = {"repository": repo.id, "target": "main", "job": {"files": {"out/a.txt": "A"}}}
    first = dags.py_default_input_dag.test(run_conf={**conf, "another_writer": True})
    assert ti_state(first, "publish") == ("failed", 2)
    assert type(dags.FAILURES[("lf_py_default_input", 2)]).__name__ == "PublishFenceError"
    assert "before the job" in str(dags.FAILURES[("lf_py_default_input", 2)])  # the pinned input is not HEAD
    foreign = repo.branch("main").get_commit()
    assert foreign.message == "another writer, after the pin" and foreign.parents == [input_commit]
    second = dags.py_default_input_dag.test(run_conf=conf)
    assert ti_state(second, "publish") == ("success", 1)
    outcome = xcoms(second, "publish")
    assert outcome["input_ref"] == foreign.id  # a new run pins the new HEAD
    assert repo.branch("main").get_commit().parents[0] == foreign.id
