"""airflow-provider-lakefs's operators and sensors, here (airflow_lakefence.operators.lakefs and
airflow_lakefence.sensors), end to end under ``dag.test()`` on both backends: the workflow of
treeverse's samples runs, and every step succeeds again when retried after its success, without a
second write; lost answers of a commit and a merge are recognised by their metadata.
"""

from __future__ import annotations

from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.publication.run_branches import (
    PROVIDER_DAG_ID_KEY,
    PROVIDER_RUN_ID_KEY,
    PROVIDER_TASK_ID_KEY,
)
from airflow_lakefence.lakefs_adapter.run_state_store import RUN_STATE_BRANCH
from tests.conftest import load_dag_module
from tests.integration.helpers import read_text, ti_state, xcoms
from tests.integration.operators.test_fenced_spark_output import clear_and_rerun

pytestmark = [pytest.mark.run_branch, pytest.mark.usefixtures("airflow_db", "lakefs_conn")]

TASKS = ["create_branch", "upload", "sense_file", "commit", "sense_commit", "merge", "get_commit", "get_object"]
WRITES = ("createBranch", "uploadObject", "commit", "mergeIntoBranch")


@pytest.fixture
def pdags() -> Any:
    module = load_dag_module("testdags/lakefs_provider_dags.py")
    module.FAILURES.clear()
    return module


def branch_of(dr: Any) -> str:
    return "example_" + dr.run_id.replace(":", "_").replace("+", "_").replace(".", "_")


def assert_workflow_done(repo: lakefs.Repository, dr: Any, input_commit: str) -> dict[str, Any]:
    """The sample's outcome: the branch made from main, committed, merged into main once."""
    assert dr.state == "success", {t: ti_state(dr, t) for t in TASKS}
    branch = branch_of(dr)
    commit = repo.branch(branch).get_commit()
    head = repo.branch("main").get_commit()
    assert xcoms(dr, "create_branch")["return_value"] == input_commit
    assert commit.parents == [input_commit] and commit.message == "hello"
    assert commit.metadata["committed_from"] == "airflow"
    assert (commit.metadata[PROVIDER_DAG_ID_KEY], commit.metadata[PROVIDER_RUN_ID_KEY]) == (dr.dag_id, dr.run_id)
    assert commit.metadata[PROVIDER_TASK_ID_KEY] == "commit"
    assert xcoms(dr, "commit")["return_value"] == commit.id
    assert xcoms(dr, "sense_commit")["return_value"] == commit.id
    assert head.parents == [input_commit, commit.id] and xcoms(dr, "merge")["return_value"] == head.id
    assert head.metadata[PROVIDER_TASK_ID_KEY] == "merge"
    details = xcoms(dr, "get_commit")["return_value"]
    assert details["id"] == head.id and details["parents"] == [input_commit, commit.id] and details["committer"]
    assert xcoms(dr, "get_object")["return_value"] == "hello"
    return {"branch": commit.id, "main": head.id}


def test_the_samples_workflow_runs_with_a_change_of_imports(pdags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    dr = pdags.workflow_dag.test(run_conf={"repository": repo.id})
    assert_workflow_done(repo, dr, input_commit)
    assert read_text(repo, "main", "out/hello.txt") == "hello"
    assert [xcoms(dr, t)["decision"] for t in ("create_branch", "commit", "merge")] == [
        "created",
        "committed",
        "merged",
    ]


def test_every_step_retried_after_its_success_succeeds_without_a_second_write(
    pdags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    dr = pdags.workflow_dag.test(run_conf={"repository": repo.id})
    before = assert_workflow_done(repo, dr, input_commit)
    # main moves on meanwhile: the retried create must still find its branch at the run's pinned input.
    lakefence_controls.reset_counts()
    dr = clear_and_rerun(pdags.workflow_dag, dr, TASKS)
    assert all(ti_state(dr, t) == ("success", 2) for t in TASKS), {t: ti_state(dr, t) for t in TASKS}
    after = assert_workflow_done(repo, dr, input_commit)
    assert after == before  # nothing written again: the branch and main are where the first tries left them
    assert [xcoms(dr, t)["decision"] for t in ("create_branch", "commit", "merge")] == ["found", "found", "found"]
    counts = lakefence_controls.counts()
    assert counts.get("uploadObject", 0) == 0  # the object already held the bytes
    # createBranch answered 409 and commit/merge answered "no changes": refused, nothing written.
    assert {op: counts.get(op, 0) for op in ("createBranch", "commit", "mergeIntoBranch")} == {
        "createBranch": 1,
        "commit": 1,
        "mergeIntoBranch": 1,
    }


@pytest.mark.parametrize("operation", ["commit", "mergeIntoBranch", "createBranch"])
def test_a_lost_answer_is_recognised_as_this_tasks_write(
    pdags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any, operation: str
) -> None:
    repo, input_commit = seeded
    # The run state's branch exists (it does after a repository's first record), so the dropped
    # createBranch is the task's own.
    repo.branch(RUN_STATE_BRANCH).create("main", hidden=True)
    lakefence_controls.reset_counts()
    lakefence_controls.add_fault(operation, drop=True, when="after")
    dr = pdags.workflow_dag.test(run_conf={"repository": repo.id})
    assert_workflow_done(repo, dr, input_commit)
    assert lakefence_controls.counts()[operation] == 1  # settled by reading, not repeated
    task = {"commit": "commit", "mergeIntoBranch": "merge", "createBranch": "create_branch"}[operation]
    assert ti_state(dr, task) == ("success", 1)
    assert xcoms(dr, task)["decision"] == "found"


def test_deleting_a_missing_branch_succeeds(pdags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    repo.branch("doomed").create(input_commit)
    first = pdags.delete_dag.test(run_conf={"repository": repo.id, "branch": "doomed"})
    assert first.state == "success" and xcoms(first, "delete_branch")["return_value"] is True
    again = clear_and_rerun(pdags.delete_dag, first, "delete_branch")
    assert again.state == "success" and ti_state(again, "delete_branch") == ("success", 2)
    assert xcoms(again, "delete_branch")["return_value"] is False
    assert "doomed" not in [b.id for b in repo.branches()]


@pytest.mark.real_lakefs
def test_symlink_files_are_written_again_on_a_retry(pdags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, _input_commit = seeded
    first = pdags.symlink_dag.test(run_conf={"repository": repo.id})
    assert first.state == "success", pdags.FAILURES
    location = xcoms(first, "symlink")["return_value"]
    assert isinstance(location, str) and location
    again = clear_and_rerun(pdags.symlink_dag, first, "symlink")
    assert ti_state(again, "symlink") == ("success", 2) and xcoms(again, "symlink")["return_value"] == location
