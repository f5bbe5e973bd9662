"""LakeFSStagingCleanupOperator end to end: staging branches left by real fenced attempts (a delete
that failed, a fence violation), a live attempt's branch, real Airflow states, real lakeFS."""

from __future__ import annotations

import json
import time
from typing import Any

import lakefs
import pytest

from airflow_lakefence import failpoints
from airflow_lakefence.core.publication.replacement import temp_branch_name
from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.core.staging.cleaner import evidence_metadata, evidence_of
from airflow_lakefence.exceptions import PublishFenceError
from airflow_lakefence.hooks.lakefs import LakeFSHook
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from airflow_lakefence.operators.cleanup import memory_variable_key
from tests.conftest import AIRFLOW_2
from tests.integration.helpers import (
    commit_files,
    leave_branch_at,
    publish_conf,
    run_dag,
    staging_branches,
    xcoms,
)

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")


def dead_attempt(point: str, dag: Any, seeded: tuple[lakefs.Repository, str], controls: Any) -> list[str]:
    """Run ``dag`` once with its attempt dying at ``point`` (:func:`leave_branch_at`); return the
    staging branches left."""
    repo, input_commit = seeded
    leave_branch_at(point, controls)
    assert run_dag(dag, publish_conf(repo, input_commit)).state == "failed"
    failpoints.disarm_all()
    return staging_branches(repo)


def mark_evidence(client: LakeFSClient, repository: str, branch: str, error: str) -> None:
    """Write the evidence marker the operator writes when it keeps a branch (see the report's patch)."""
    head = client.get_commit(repository, branch)
    if evidence_of(head.metadata):
        return
    record = decode_metadata(head.metadata)
    assert record is not None
    client.commit(
        repository, branch, "evidence", evidence_metadata(record.attempt, record.input_ref, error), allow_empty=True
    )


def stored_memory(key: str) -> Any:
    """The cleaner memory in the metadata DB's Variable ``key``."""
    from airflow.models.variable import Variable

    return json.loads(Variable.get(key))


def by_branch(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {entry["branch"]: entry for entry in entries}


def test_deletes_dead_attempts_keeps_evidence_and_is_idempotent(
    publishers: Any, cleaners: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    client = LakeFSHook().client
    # A dead unstaged attempt (died during its job) and a dead staged one (died after staging).
    dead_attempt("after_job", publishers.workspace_dag, seeded, lakefence_controls)
    dead_attempt("after_stage", publishers.direct_dag, seeded, lakefence_controls)
    # A fence violation: a foreign commit lands during the job; the operator keeps the branch.
    failpoints.arm("after_job", lambda: commit_files(repo, "main", {"other.txt": "x"}, "racer"))
    assert run_dag(publishers.workspace_dag, publish_conf(repo, input_commit)).state == "failed"
    failpoints.disarm_all()
    evidence = publishers.FAILURES[("lf_test_workspace", 1)]
    assert isinstance(evidence, PublishFenceError) and evidence.staging_branch
    mark_evidence(client, repo.id, evidence.staging_branch, type(evidence).__name__)
    left = staging_branches(repo)
    assert len(left) == 3 and evidence.staging_branch in left
    unstaged = next(b for b in left if client.get_commit(repo.id, b).id == input_commit)

    staged = next(b for b in left if b not in (unstaged, evidence.staging_branch))

    dry = run_dag(cleaners.clean_dry_run_dag, {"repository": repo.id})
    assert dry.state == "success"
    planned = xcoms(dry, "clean")["return_value"]
    assert planned["dry_run"] is True and len(planned["deleted"]) == 1
    assert sorted(staging_branches(repo)) == sorted(left)  # nothing deleted

    lakefence_controls.reset_counts()
    dr = run_dag(cleaners.clean_dag, {"repository": repo.id})
    assert dr.state == "success"
    result = xcoms(dr, "clean")["return_value"]
    deleted, kept = by_branch(result["deleted"]), by_branch(result["kept"])
    assert set(deleted) == {unstaged}
    assert "failed" in deleted[unstaged]["reason"] and deleted[unstaged]["dag_id"] == "lf_test_workspace"
    assert set(kept) == {evidence.staging_branch, staged}
    assert kept[evidence.staging_branch]["evidence"] == "PublishFenceError"
    # A staged branch without a marker, of a failed task instance, may be evidence whose
    # marker could not be written: it is kept.
    assert "staged but not marked" in kept[staged]["reason"] and kept[staged]["evidence"] is None
    # One listing, one get_commit per distinct HEAD, one delete per dead branch, and one
    # uncommitted diff (amount=1) per unstaged branch about to be deleted: does it hold anything?
    assert lakefence_controls.counts() == {"listBranches": 1, "getCommit": 3, "diffBranch": 1, "deleteBranch": 1}
    assert sorted(staging_branches(repo)) == sorted([evidence.staging_branch, staged])

    again = xcoms(run_dag(cleaners.clean_dag, {"repository": repo.id}), "clean")["return_value"]
    assert again["deleted"] == [] and set(by_branch(again["kept"])) == {evidence.staging_branch, staged}

    # Asked to, the cleaner deletes the evidence of dead attempts too, marked or not.
    asked = xcoms(run_dag(cleaners.clean_evidence_dag, {"repository": repo.id}), "clean")["return_value"]
    assert set(by_branch(asked["deleted"])) == {evidence.staging_branch, staged}
    assert staging_branches(repo) == []


@pytest.mark.output_correctness
def test_a_dead_unstaged_branch_holding_uncommitted_changes_is_kept_until_told(
    publishers: Any, cleaners: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    # A direct-mode attempt died after its job: its output is uncommitted on the unstaged branch, as
    # the uploads of a try that failed closed before staging and could not mark its branch.
    (left,) = dead_attempt("after_job", publishers.direct_dag, seeded, lakefence_controls)
    assert repo.branch(left).get_commit().id == input_commit and list(repo.branch(left).uncommitted())
    lakefence_controls.reset_counts()
    result = xcoms(run_dag(cleaners.clean_dag, {"repository": repo.id}), "clean")["return_value"]
    assert lakefence_controls.counts() == {"listBranches": 1, "getCommit": 1, "diffBranch": 1}
    assert result["deleted"] == [] and staging_branches(repo) == [left]
    reason = by_branch(result["kept"])[left]["reason"]
    assert "unstaged with uncommitted changes" in reason and "delete_evidence=True" in reason
    asked = xcoms(run_dag(cleaners.clean_evidence_dag, {"repository": repo.id}), "clean")["return_value"]
    assert set(by_branch(asked["deleted"])) == {left} and staging_branches(repo) == []


def test_a_dead_attempts_merge_only_temporary_branch_is_deleted(
    publishers: Any, cleaners: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, _ = seeded
    client = LakeFSHook().client
    dead_attempt("after_stage", publishers.direct_dag, seeded, lakefence_controls)
    (staged,) = staging_branches(repo)
    # As if the worker had died in the middle of a merge-only replacement: the hidden temporary
    # branch it made from the target outlived it (a SIGKILL runs no ``finally``).
    temp = temp_branch_name(staged)
    client.create_branch(repo.id, temp, client.get_commit(repo.id, "main").id, hidden=True)
    assert sorted(staging_branches(repo)) == sorted([staged, temp])

    result = xcoms(run_dag(cleaners.clean_dag, {"repository": repo.id}), "clean")["return_value"]
    deleted, kept = by_branch(result["deleted"]), by_branch(result["kept"])
    # The staged branch may be evidence (kept); the temporary one never is.
    assert set(deleted) == {temp} and set(kept) == {staged}
    assert deleted[temp]["reason"].startswith("merge-only temporary branch: its task instance is failed")
    assert deleted[temp]["dag_id"] == "lf_test_direct" and deleted[temp]["evidence"] is None
    assert staging_branches(repo) == [staged]


def test_keeps_a_live_attempts_branch(
    publishers: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    from airflow_lakefence.airflow_adapter.task_instances import TaskSdkView
    from airflow_lakefence.operators import LakeFSStagingCleanupOperator

    # A dead attempt's (unstaged) leftover of another run...
    dead = dead_attempt("after_job", publishers.workspace_dag, seeded, lakefence_controls)
    results: list[dict[str, Any]] = []

    def clean_while_running() -> None:
        # ...and the running attempt's staged branch: run the cleaner's body inside the live task.
        client = LakeFSHook().client
        cleaner = LakeFSStagingCleanupOperator(
            task_id="clean_inline",
            repository=repo.id,
            publishers=[("lf_test_direct", "publish"), ("lf_test_workspace", "publish")],
        )
        results.append(cleaner.clean(client, TaskSdkView(), cleaner._inspect(client), {}, time.time()))

    failpoints.arm("after_fence_2", clean_while_running)
    dr = run_dag(publishers.direct_dag, publish_conf(repo, input_commit))
    assert dr.state == "success"
    live = xcoms(dr, "publish")["staging_branch"]
    deleted, kept = by_branch(results[0]["deleted"]), by_branch(results[0]["kept"])
    assert set(deleted) == set(dead)
    assert set(kept) == {live}
    # Airflow 2's dag.test() runs the try without committing its running state (a worker commits it
    # first): the cleaner sees the live try as scheduled there, and keeps its branch all the same.
    state = "scheduled" if AIRFLOW_2 else "running"
    assert state in kept[live]["reason"], kept[live]["reason"]
    assert staging_branches(repo) == []  # the live attempt deleted its own branch when done


@pytest.mark.output_correctness
def test_a_failed_delete_is_reported_and_does_not_fail_the_cleaner(
    publishers: Any, cleaners: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, _ = seeded
    (left,) = dead_attempt("after_job", publishers.workspace_dag, seeded, lakefence_controls)
    lakefence_controls.add_fault("deleteBranch", status=500)
    dr = run_dag(cleaners.clean_dag, {"repository": repo.id})
    assert dr.state == "success"
    result = xcoms(dr, "clean")["return_value"]
    assert result["deleted"] == [] and "delete failed" in by_branch(result["kept"])[left]["reason"]
    assert staging_branches(repo) == [left]
    # The next run deletes it.
    again = xcoms(run_dag(cleaners.clean_dag, {"repository": repo.id}), "clean")["return_value"]
    assert set(by_branch(again["deleted"])) == {left} and staging_branches(repo) == []


def test_unidentified_branch_deleted_after_max_age(
    publishers: Any,
    cleaners: Any,
    seeded: tuple[lakefs.Repository, str],
    lakefence_controls: Any,
    lakefence_server: Any,
    lakefence_client: lakefs.Client,
) -> None:
    repo, input_commit = seeded
    (left,) = dead_attempt("after_job", publishers.workspace_dag, seeded, lakefence_controls)
    # No publishers given and no record on the branch: the first sight only starts the clock...
    first = xcoms(run_dag(cleaners.clean_unscoped_dag, {"repository": repo.id}), "clean")
    assert first["return_value"]["deleted"] == []
    assert "cannot be identified" in by_branch(first["return_value"]["kept"])[left]["reason"]
    assert first["first_seen"][left][0] == input_commit
    memory_key = memory_variable_key("lakefs_default", repo.id, "lakefence")
    assert stored_memory(memory_key)[left] == first["first_seen"][left]
    # A later run of the same cleaner DAG over another repository remembers nothing of this one:
    # it must not become the memory this repository's next run reads (an XCom pulled across runs
    # would hand over that newer run's memory).
    other = lakefs.Repository(f"{repo.id}-other", client=lakefence_client).create(
        storage_namespace=f"{lakefence_server.storage_namespace.rstrip('/')}/{repo.id}-other", default_branch="main"
    )
    try:
        between = xcoms(run_dag(cleaners.clean_unscoped_dag, {"repository": other.id}), "clean")
        assert between["first_seen"] == {} and between["return_value"]["deleted"] == []
    finally:
        other.delete()
    # A run before max_age (1 s) has passed on the cleaner's clock keeps it...
    early = xcoms(run_dag(cleaners.clean_unscoped_dag, {"repository": repo.id}), "clean")["return_value"]
    assert early["deleted"] == [] and left in by_branch(early["kept"])
    # ...and a later run that finds it unchanged for max_age deletes it.
    cleaners.CLOCK.advance(1.1)
    second = xcoms(run_dag(cleaners.clean_unscoped_dag, {"repository": repo.id}), "clean")["return_value"]
    assert set(by_branch(second["deleted"])) == {left}
    assert staging_branches(repo) == []
    assert stored_memory(memory_key) == {}


def test_operator_marks_the_branch_it_keeps_as_evidence(publishers: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    failpoints.arm("after_job", lambda: commit_files(repo, "main", {"other.txt": "x"}, "racer"))
    assert run_dag(publishers.workspace_dag, publish_conf(repo, input_commit)).state == "failed"
    error = publishers.FAILURES[("lf_test_workspace", 1)]
    head = repo.branch(error.staging_branch).get_commit()
    assert evidence_of(head.metadata) == "PublishFenceError"
    record = decode_metadata(head.metadata)
    assert record is not None and record.attempt.try_number == 1 and record.input_ref == input_commit
