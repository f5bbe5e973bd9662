"""Provider registration, and a failing Spark job."""

from __future__ import annotations

from typing import Any

import lakefs
import pytest

import airflow_lakefence
from airflow_lakefence.exceptions import InvalidInputError, SparkJobError
from airflow_lakefence.provider_info import get_provider_info
from tests.conftest import load_dag_module
from tests.integration.helpers import branches, commit_files, run_dag, staging_branches


def test_provider_is_registered_with_airflow() -> None:
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    provider = manager.providers["airflow-provider-lakefence"]
    assert provider.version == airflow_lakefence.__version__
    info = get_provider_info()
    assert info["versions"] == [airflow_lakefence.__version__]
    conn = info["connection-types"][0]
    assert conn["connection-type"] == "lakefs"
    assert set(conn["ui-field-behaviour"]["relabeling"]) == {"host", "login", "password"}
    assert "verify_ssl" in conn["conn-fields"]
    assert "lakefs" in manager.hooks  # the task-sdk runtime manager lists the same hooks


@pytest.mark.usefixtures("airflow_db", "lakefs_conn")
def test_spark_failure_publishes_nothing_and_cleans_up(lakefence_repo: lakefs.Repository) -> None:
    dags: Any = load_dag_module("testdags/fenced_test_dags.py")
    dags.FAILURES.clear()
    input_commit = commit_files(lakefence_repo, "main", {"in.txt": "x"}, "seed")
    job = {"files": {"out/a.txt": "A"}, "fail": True}
    dr = run_dag(
        dags.workspace_dag, {"repository": lakefence_repo.id, "target": "main", "input_ref": input_commit, "job": job}
    )
    assert dr.state == "failed"
    error = dags.FAILURES[("lf_test_workspace", 1)]
    assert isinstance(error, SparkJobError) and "Error code is: 3" in str(error)
    assert lakefence_repo.branch("main").get_commit().id == input_commit
    assert staging_branches(lakefence_repo) == []


@pytest.mark.usefixtures("airflow_db", "lakefs_conn")
def test_missing_spark_connection_does_not_fall_back_to_yarn(
    lakefence_repo: lakefs.Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    dags: Any = load_dag_module("testdags/fenced_test_dags.py")
    dags.FAILURES.clear()
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_LOCAL")
    input_commit = lakefence_repo.branch("main").get_commit().id
    dr = run_dag(
        dags.workspace_dag, {"repository": lakefence_repo.id, "target": "main", "input_ref": input_commit, "job": {}}
    )
    assert dr.state == "failed"
    error = dags.FAILURES[("lf_test_workspace", 1)]
    assert isinstance(error, InvalidInputError) and "spark_local" in str(error)
    assert branches(lakefence_repo) == ["main"]
