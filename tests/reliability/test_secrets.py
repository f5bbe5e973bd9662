"""The lakeFS secret stays out of logs, XCom, argv, commit metadata and errors.

Airflow masks connection passwords in task logs (``***``), so a clean ``dag.test()`` log alone
proves little. The secret is also looked for where nothing masks it: the command line the
SparkSubmitHook builds (captured at ``submit``), the argv and environment the job itself saw, the
rendered template fields Airflow stores, and the logs of attempt processes run outside Airflow's
task runner, where a canary shows that nothing would mask it. Exception texts are covered for every
bad-input case in test_bad_input.py and for the lakeFS-failure cases in test_lakefs_faults.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lakefs
import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_lakefence.core.names.keys import PublicationKey
from tests.integration.helpers import commit_files, read_text, run_dag, xcoms
from tests.reliability.harness import DAG_ID, TARGET, TASK_ID, ForkServer, Lake, new_repository, run_attempt
from tests.reliability.registry import AttemptRegistry


@pytest.mark.usefixtures("airflow_db")
def test_secret_absent_from_a_successful_publish(
    dags: Any,
    lakefence_repo: lakefs.Repository,
    lakefs_conn: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    secret = lakefs_conn["password"]
    submitted: list[dict[str, Any]] = []
    original_submit = SparkSubmitHook.submit

    def observe_submit(hook: SparkSubmitHook, application: str = "", **kwargs: Any) -> Any:
        # What the provider puts on the command line and what it logs of it, unmasked.
        command = hook._build_spark_submit_command(application)
        submitted.append({"argv": command, "logged": hook._mask_cmd(command), "env": dict(hook._env or {})})
        return original_submit(hook, application, **kwargs)

    monkeypatch.setattr(SparkSubmitHook, "submit", observe_submit)
    input_commit = commit_files(lakefence_repo, "main", {"in/data.txt": "input"}, "seed input")
    job = {"files": {"out/a.txt": "A"}, "dump_argv": True}
    dr = run_dag(
        dags.workspace_dag, {"repository": lakefence_repo.id, "target": "main", "input_ref": input_commit, "job": job}
    )
    assert dr.state == "success"

    # The secret did reach the job, through its environment only.
    (call,) = submitted
    assert call["env"]["LAKEFS_SECRET_ACCESS_KEY"] == secret
    assert read_text(lakefence_repo, "main", "debug/env_has_secret.txt") == "True"
    argv_seen_by_job = json.loads(read_text(lakefence_repo, "main", "debug/argv.json"))
    assert any(arg.startswith("spec=") for arg in argv_seen_by_job)
    for text in (json.dumps(call["argv"]), call["logged"], json.dumps(argv_seen_by_job)):
        assert secret not in text

    # XCom, commit metadata and messages on the target and of the staged commit.
    values = xcoms(dr, "publish")
    assert secret not in json.dumps(values)
    for ref in (values["output_ref"], values["staged_commit"]):
        commit = lakefence_repo.commit(ref).get_commit()
        assert secret not in json.dumps(commit.metadata) + commit.message + commit.committer

    # Rendered template fields (env_vars and conf are templated; Airflow stores them).
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session

    with create_session() as session:
        rendered = session.query(RenderedTaskInstanceFields).filter_by(dag_id=dr.dag_id, run_id=dr.run_id).all()
        assert rendered
        assert secret not in json.dumps([row.rendered_fields for row in rendered], default=str)

    # The task log (masked by Airflow; the checks above do not rely on masking).
    out, err = capfd.readouterr()
    assert "Spark-Submit cmd" in out + err
    assert secret not in out + err


def test_attempt_process_logs_are_unmasked_and_hold_no_secret(
    launcher: ForkServer, lake: Lake, driver_env: dict[str, str], tmp_path: Path
) -> None:
    """The attempt driver runs the operator outside Airflow's task runner: nothing masks its log.

    A canary job prints the secret and it shows up verbatim; the same attempt without the canary
    logs everything the operator and the SparkSubmitHook log, and the secret is not there.
    """
    secret = lake.secret_access_key
    logs = []
    for canary in (True, False):
        repo, input_commit = new_repository(lake)
        registry = AttemptRegistry(tmp_path / f"registry-{canary}.sqlite")
        key = PublicationKey(DAG_ID, f"secret-{canary}", TASK_ID, -1)
        ti = registry.new_try(key.dag_id, key.run_id, key.task_id)
        operator = {"repository": repo.id, "target_branch": TARGET, "input_ref": input_commit}
        job = {"files": {"out/a.txt": "A"}, "print_secret": canary}
        outcome = run_attempt(launcher, tmp_path, driver_env, registry, operator, job, ti)
        assert outcome.succeeded, outcome.result
        assert "Spark-Submit cmd" in outcome.log and "Publish fence" in outcome.log
        logs.append(outcome.log)
    assert f"CANARY {secret}" in logs[0]  # unmasked: a secret would show
    assert secret not in logs[1]
