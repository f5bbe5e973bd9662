"""FencedSparkPublishOperator end to end: real Airflow DB and ``dag.test()``, real HTTP to the local
lakeFS server through the real SDK. The Spark engine is the fake spark-submit (JVM skipped); the
real-PySpark run is the example DAG's test.
"""

from __future__ import annotations

from typing import Any

import lakefs
import pytest

from airflow_lakefence import failpoints
from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.exceptions import (
    InputRefError,
    OutputPrefixError,
    PublishBudgetError,
    PublishFenceError,
    StaleAttemptError,
    WorkspaceError,
)
from tests.integration.helpers import (
    branches,
    commit_files,
    die_after_publishing,
    foreign_commit_during_the_job,
    publish_conf,
    read_text,
    run_dag,
    staging_branches,
    ti_state,
    update_ti,
    xcoms,
)

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")


def test_workspace_publish_merges_onto_input(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    dr = run_dag(
        dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A", "out/b/c.txt": "C"}})
    )
    assert dr.state == "success"
    values = xcoms(dr, "publish")
    head = repo.branch("main").get_commit()
    assert values["return_value"] == values["output_ref"] == head.id
    assert values["decision"] == "merge"
    assert values["input_ref"] == input_commit
    assert head.parents[0] == input_commit
    assert head.parents[1] == values["staged_commit"]
    assert head.metadata[".lakefs.merge.strategy"]
    record = decode_metadata(head.metadata)
    assert record is not None and record.role == "publish" and record.input_ref == input_commit
    assert record.attempt.try_number == 1 and record.staged_commit == values["staged_commit"]
    assert read_text(repo, "main", "out/a.txt") == "A"
    assert read_text(repo, "main", "out/b/c.txt") == "C"
    assert read_text(repo, "main", "in/data.txt") == "input"
    assert values["staging_branch"].startswith("lakefence-publish-")
    assert staging_branches(repo) == []


def test_branch_name_input_is_resolved_once(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    dr = run_dag(dags.workspace_dag, publish_conf(repo, "main", {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success"
    values = xcoms(dr, "publish")
    assert values["input_ref"] == input_commit
    assert repo.branch("main").get_commit().parents[0] == input_commit


def test_no_changes_is_a_noop(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"in/data.txt": "input"}}))
    assert dr.state == "success"
    values = xcoms(dr, "publish")
    assert values["decision"] == "noop"
    assert values["output_ref"] == values["staged_commit"] == input_commit
    assert repo.branch("main").get_commit().id == input_commit
    assert staging_branches(repo) == []


def test_abandoned_publication_is_replaced_by_the_retry(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    seen = die_after_publishing(repo)
    dr = run_dag(dags.retry_dag, publish_conf(repo, input_commit, {"stamp_path": "out/stamp.txt"}))
    assert dr.state == "success"
    assert ti_state(dr, "publish") == ("success", 2)
    abandoned = repo.commit(seen[0]).get_commit()
    assert decode_metadata(abandoned.metadata).attempt.try_number == 1  # type: ignore[union-attr]
    values = xcoms(dr, "publish")
    head = repo.branch("main").get_commit()
    assert values["decision"] == "replace"
    assert head.id == values["output_ref"] == values["staged_commit"]
    assert head.parents == [input_commit]
    stamp = read_text(repo, "main", "out/stamp.txt")
    assert "-t2-" in stamp and stamp == values["staging_branch"]
    assert [c.id for c in repo.branch("main").log(max_amount=2)] == [head.id, input_commit]
    assert staging_branches(repo) == []


def test_abandoned_publication_relocated_when_retry_changes_nothing(
    dags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = seeded
    die_after_publishing()
    job = {"first_try_files": {"out/only-try-1.txt": "1"}}
    dr = run_dag(dags.retry_dag, publish_conf(repo, input_commit, job))
    assert dr.state == "success"
    values = xcoms(dr, "publish")
    assert values["decision"] == "relocate"
    assert repo.branch("main").get_commit().id == values["output_ref"] == input_commit
    assert "out/only-try-1.txt" not in [o.path for o in repo.ref("main").objects()]


def test_foreign_commit_before_the_run_fails_before_the_job(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    foreign = commit_files(repo, "main", {"other.txt": "x"}, "someone else")
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "failed"
    assert isinstance(dags.FAILURES[("lf_test_workspace", 1)], PublishFenceError)
    assert repo.branch("main").get_commit().id == foreign
    assert staging_branches(repo) == []


def test_foreign_commit_during_the_job_fails_closed_and_keeps_evidence(
    dags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = seeded
    _, error = foreign_commit_during_the_job(dags.workspace_dag, dags.FAILURES, seeded)
    kept = staging_branches(repo)
    assert kept == [error.staging_branch]
    marker = repo.branch(kept[0]).get_commit()  # the evidence marker retries and the cleaner recognise
    assert marker.metadata["lakefence.evidence"] == "PublishFenceError"
    evidence = repo.commit(marker.parents[0]).get_commit()
    assert evidence.parents == [input_commit]
    assert read_text(repo, kept[0], "out/a.txt") == "A"


def test_target_two_commits_past_input_fails_closed(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    commit_files(repo, "main", {"x1.txt": "1"}, "one")
    second = commit_files(repo, "main", {"x2.txt": "2"}, "two")
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "failed"
    assert isinstance(dags.FAILURES[("lf_test_workspace", 1)], PublishFenceError)
    assert repo.branch("main").get_commit().id == second


@pytest.mark.parametrize(
    ("point", "state"), [("after_job", "failed"), ("after_stage", "failed"), ("after_stage", "success")]
)
def test_stale_attempt_publishes_nothing(
    dags: Any, seeded: tuple[lakefs.Repository, str], point: str, state: str
) -> None:
    repo, input_commit = seeded
    failpoints.arm(point, lambda: update_ti("lf_test_workspace", "publish", state=state))
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    error = dags.FAILURES.get(("lf_test_workspace", 1))
    assert isinstance(error, StaleAttemptError), error
    assert f"state is '{state}'" in str(error)
    assert repo.branch("main").get_commit().id == input_commit
    assert staging_branches(repo) == []
    assert xcoms(dr, "publish").get("output_ref") is None


def test_cleared_attempt_publishes_nothing(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    """Clearing mints a new task-instance id (3.3): the old try's fence finds its id archived; on 3.0
    to 3.2 the id stays until the next try starts, and the fence finds the state ``restarting``; on
    2.11 the row's state is gone (``none``)."""
    repo, input_commit = seeded
    failpoints.arm("after_stage", lambda: update_ti("lf_test_workspace", "publish", clear=True))
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    error = dags.FAILURES.get(("lf_test_workspace", 1))
    assert isinstance(error, StaleAttemptError)
    assert any(why in str(error) for why in ("no longer live", "state is 'restarting'", "state is 'none'")), error
    assert repo.branch("main").get_commit().id == input_commit
    assert staging_branches(repo) == []
    assert xcoms(dr, "publish").get("output_ref") is None


def test_read_only_writes_nothing(dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any) -> None:
    repo, input_commit = seeded
    lakefence_controls.reset_counts()
    dr = run_dag(dags.read_only_dag, publish_conf(repo, "main", {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success"
    values = xcoms(dr, "publish")
    assert values["output_ref"] == values["input_ref"] == input_commit
    assert values["decision"] == "read_only"
    counts = lakefence_controls.counts()
    assert set(counts) == {"getCommit"}, counts
    assert repo.branch("main").get_commit().id == input_commit
    assert branches(repo) == ["main"]


def test_workspace_mode_uploads_a_thousand_files(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    dr = run_dag(
        dags.workspace_dag,
        publish_conf(repo, input_commit, {"generate": {"prefix": "many/", "count": 1000, "size": 64}}),
    )
    assert dr.state == "success"
    paths = [o.path for o in repo.ref("main").objects(prefix="many/")]
    assert len(paths) == 1000
    assert read_text(repo, "main", "many/part-00999.txt") == "x" * 64


def test_direct_mode_publishes_what_the_job_wrote(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    dr = run_dag(
        dags.direct_dag,
        publish_conf(repo, input_commit, {"files": {"tables/t/p1.txt": "1"}}, output_prefixes=["tables/t/"]),
    )
    assert dr.state == "success"
    values = xcoms(dr, "publish")
    assert values["decision"] == "merge"
    assert read_text(repo, "main", "tables/t/p1.txt") == "1"
    assert repo.branch("main").get_commit().parents[0] == input_commit


@pytest.mark.parametrize("dag_name", ["workspace_dag", "direct_dag"])
def test_output_outside_prefixes_fails_closed(dags: Any, seeded: tuple[lakefs.Repository, str], dag_name: str) -> None:
    repo, input_commit = seeded
    job = {"files": {"tables/t/ok.txt": "1", "tables/other/bad.txt": "2"}}
    dr = run_dag(getattr(dags, dag_name), publish_conf(repo, input_commit, job, output_prefixes=["tables/t"]))
    assert dr.state == "failed"
    error = dags.FAILURES[(getattr(dags, dag_name).dag_id, 1)]
    assert isinstance(error, OutputPrefixError)
    assert "tables/other/" in str(error)
    assert repo.branch("main").get_commit().id == input_commit


def test_publish_budget_larger_than_remaining_time(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    dr = run_dag(dags.budget_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}, "sleep": 1.5}))
    assert dr.state == "failed"
    assert isinstance(dags.FAILURES[("lf_test_budget", 1)], PublishBudgetError)
    assert repo.branch("main").get_commit().id == input_commit
    assert staging_branches(repo) == []


def test_unknown_input_ref_is_a_clear_error(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    dr = run_dag(dags.workspace_dag, publish_conf(repo, "f" * 64, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "failed"
    assert isinstance(dags.FAILURES[("lf_test_workspace", 1)], InputRefError)
    assert branches(repo) == ["main"]
    assert repo.branch("main").get_commit().id == input_commit


def test_empty_workspace_is_an_error_unless_allowed(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {}))
    assert dr.state == "failed"
    assert isinstance(dags.FAILURES[("lf_test_workspace", 1)], WorkspaceError)
    dr = run_dag(dags.empty_ok_dag, publish_conf(repo, input_commit, {}))
    assert dr.state == "success"
    assert xcoms(dr, "publish")["decision"] == "noop"
    assert repo.branch("main").get_commit().id == input_commit
