"""The Python adapter (``FencedPythonPublishOperator`` and ``@task.lakefs_publish``) end to end:
real Airflow DB and ``dag.test()``, real HTTP to lakeFS through the real SDK. Same fences and
decisions as the Spark operator: publish, replace after a crash, fail closed with evidence.
"""

from __future__ import annotations

from typing import Any

import lakefs
import pytest

from airflow_lakefence import failpoints
from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.exceptions import JobError, OutputPrefixError, StaleAttemptError
from tests.integration.helpers import (
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


@pytest.mark.parametrize("dag_name", ["py_workspace_dag", "py_taskflow_dag"])
def test_a_function_publishes_its_workspace_on_top_of_the_pinned_input(
    dags: Any, seeded: tuple[lakefs.Repository, str], dag_name: str
) -> None:
    repo, input_commit = seeded
    job = {"files": {"out/a.txt": "A"}, "read_input": {"from": "in/data.txt", "to": "out/copy.txt"}}
    dr = run_dag(getattr(dags, dag_name), publish_conf(repo, "main", job))
    assert dr.state == "success"
    values = xcoms(dr, "publish")
    head = repo.branch("main").get_commit()
    assert values["return_value"] == values["output_ref"] == head.id
    assert (values["decision"], values["input_ref"]) == ("merge", input_commit)
    assert head.parents == [input_commit, values["staged_commit"]]
    record = decode_metadata(head.metadata)
    assert record is not None and record.role == "publish" and record.attempt.key.dag_id == dr.dag_id
    assert read_text(repo, "main", "out/a.txt") == "A"
    assert read_text(repo, "main", "out/copy.txt") == "input"  # read at the input commit
    assert staging_branches(repo) == []


@pytest.mark.parametrize("dag_name", ["py_retry_dag", "py_taskflow_dag"])
def test_a_crash_after_publishing_is_replaced_by_the_retry(
    dags: Any, seeded: tuple[lakefs.Repository, str], dag_name: str
) -> None:
    repo, input_commit = seeded
    abandoned = die_after_publishing(repo)
    dr = run_dag(getattr(dags, dag_name), publish_conf(repo, input_commit, {"stamp_path": "out/stamp.txt"}))
    assert dr.state == "success"
    assert ti_state(dr, "publish") == ("success", 2)
    assert decode_metadata(repo.commit(abandoned[0]).get_commit().metadata).attempt.try_number == 1  # type: ignore[union-attr]
    values = xcoms(dr, "publish")
    head = repo.branch("main").get_commit()
    assert values["decision"] == "replace"
    assert head.id == values["output_ref"] == values["staged_commit"]
    assert head.parents == [input_commit]  # replaced, not stacked on try 1's publication
    stamp = read_text(repo, "main", "out/stamp.txt")
    assert "-t2-" in stamp and stamp == values["staging_branch"]
    assert staging_branches(repo) == []


def test_a_foreign_commit_on_the_target_fails_closed_and_keeps_the_staging_branch(
    dags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, _ = seeded
    dr, error = foreign_commit_during_the_job(dags.py_workspace_dag, dags.FAILURES, seeded)
    assert staging_branches(repo) == [error.staging_branch]
    assert repo.branch(error.staging_branch).get_commit().metadata["lakefence.evidence"] == "PublishFenceError"
    assert read_text(repo, error.staging_branch, "out/a.txt") == "A"
    assert xcoms(dr, "publish")["staging_branch"] == error.staging_branch


def test_direct_mode_publishes_what_the_function_wrote_into_the_staging_branch(
    dags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = seeded
    job = {"files": {"tables/t/p1.txt": "1"}}
    dr = run_dag(dags.py_direct_dag, publish_conf(repo, input_commit, job, output_prefixes=["tables/t/"]))
    assert dr.state == "success"
    assert xcoms(dr, "publish")["decision"] == "merge"
    assert read_text(repo, "main", "tables/t/p1.txt") == "1"


def test_direct_mode_outside_the_prefixes_fails_closed(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    job = {"files": {"tables/t/ok.txt": "1", "tables/other/bad.txt": "2"}}
    dr = run_dag(dags.py_direct_dag, publish_conf(repo, input_commit, job, output_prefixes=["tables/t/"]))
    assert dr.state == "failed"
    error = dags.FAILURES[("lf_py_direct", 1)]
    assert isinstance(error, OutputPrefixError) and "tables/other/" in str(error)
    assert repo.branch("main").get_commit().id == input_commit


def test_a_failing_function_publishes_nothing(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    dr = run_dag(dags.py_workspace_dag, publish_conf(repo, input_commit, {"fail": True}))
    assert dr.state == "failed"
    error = dags.FAILURES[("lf_py_workspace", 1)]
    assert type(error) is JobError and "failing on purpose" in str(error)
    assert repo.branch("main").get_commit().id == input_commit
    assert staging_branches(repo) == []


def test_a_cleared_attempt_publishes_nothing(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    failpoints.arm("after_stage", lambda: update_ti("lf_py_workspace", "publish", clear=True))
    dr = run_dag(dags.py_workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    error = dags.FAILURES.get(("lf_py_workspace", 1))
    assert isinstance(error, StaleAttemptError) and "no longer live" in str(error)
    assert repo.branch("main").get_commit().id == input_commit
    assert xcoms(dr, "publish").get("output_ref") is None
