"""dags_examples/example_monitoring.py runs: it detects an abandoned publication, alerts, and cleans
a dead attempt's staging branch (publications made by the test publisher DAGs, fake spark-submit)."""

from __future__ import annotations

from typing import Any

import lakefs
import pytest

from airflow_lakefence import failpoints
from tests.conftest import load_dag_module
from tests.integration.helpers import commit_files, run_dag, staging_branches, ti_state, xcoms

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")


def test_monitoring_example_detects_alerts_and_cleans(
    lakefence_repo: lakefs.Repository, lakefence_controls: Any
) -> None:
    repo = lakefence_repo
    publishers = load_dag_module("testdags/fenced_test_dags.py")
    input_commit = commit_files(repo, "main", {"in/data.txt": "input"}, "seed input")
    job = {"repository": repo.id, "target": "main", "input_ref": input_commit, "job": {"files": {"o/a": "A"}}}

    # A dead attempt's staged branch (its delete failed), then try 1 of another run publishes and dies.
    def die_leaving_branch() -> None:
        lakefence_controls.add_fault("deleteBranch", status=500)
        raise RuntimeError("worker died after staging")

    failpoints.arm("after_stage", die_leaving_branch)
    assert run_dag(publishers.direct_dag, job).state == "failed"
    failpoints.disarm_all()
    leftover = staging_branches(repo)
    assert len(leftover) == 1

    def die() -> None:
        raise RuntimeError("worker died after publishing")

    failpoints.arm("after_verify", die)
    published = run_dag(publishers.workspace_dag, job)
    assert ti_state(published, "publish") == ("failed", 1)
    failpoints.disarm_all()

    monitor = load_dag_module("examples/example_monitoring.py").dag
    assert monitor.schedule == "@hourly"
    dr = monitor.test(run_conf={"repository": repo.id, "publisher_dag_id": "lf_test_workspace"})
    assert dr.state == "success"
    found = xcoms(dr, "detect_abandoned")["return_value"]
    assert found["verdict"] == "abandoned" and found["run_id"] == published.run_id
    assert xcoms(dr, "alert")["return_value"] == found
    cleaned = xcoms(dr, "clean_staging")["return_value"]
    # A staged branch without an evidence marker, of a failed task instance, may be evidence
    # whose marker could not be written: the cleaner keeps it (delete_evidence=True would delete it).
    assert cleaned["deleted"] == []
    assert [d["branch"] for d in cleaned["kept"]] == leftover
    assert "staged but not marked" in cleaned["kept"][0]["reason"]
    assert staging_branches(repo) == leftover
