"""The publish under lakeFS faults, its lakeFS call counts, and where the secret never goes."""

from __future__ import annotations

import json
from typing import Any

import lakefs
import pytest

from airflow_lakefence import failpoints
from airflow_lakefence.exceptions import InputRefError, LakeFSUnavailableError
from airflow_lakefence.lakefs_adapter.run_state_store import RUN_STATE_BRANCH
from tests.integration.helpers import publications_on_top_of, publish_conf, read_text, run_dag, staging_branches, xcoms

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")


def test_merge_answer_lost_is_not_repeated(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    lakefence_controls.reset_counts()
    lakefence_controls.add_fault("mergeIntoBranch", drop=True, when="after")
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success"
    assert lakefence_controls.counts()["mergeIntoBranch"] == 1
    head = repo.branch("main").get_commit()
    values = xcoms(dr, "publish")
    assert values["decision"] == "idempotent" and values["output_ref"] == head.id
    assert publications_on_top_of(repo, input_commit) == [head.id]
    assert head.parents[0] == input_commit
    assert staging_branches(repo) == []


def test_merge_refused_with_503_is_re_evaluated_then_merged_once(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    lakefence_controls.reset_counts()
    lakefence_controls.add_fault("mergeIntoBranch", status=503, when="before")
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success"
    assert lakefence_controls.counts()["mergeIntoBranch"] == 2
    assert xcoms(dr, "publish")["decision"] == "merge"
    assert len(publications_on_top_of(repo, input_commit)) == 1
    assert read_text(repo, "main", "out/a.txt") == "A"


def test_transient_read_failures_are_retried(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    lakefence_controls.add_fault("getCommit", status=503)
    lakefence_controls.add_fault("getCommit", nth=3, drop=True)
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success"
    assert read_text(repo, "main", "out/a.txt") == "A"


def test_lakefs_down_is_a_clear_error_and_nothing_is_published(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    for nth in range(1, 11):  # more than the read retries
        lakefence_controls.add_fault("getCommit", nth=nth, status=503)
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "failed"
    error = dags.FAILURES[("lf_test_workspace", 1)]
    assert isinstance(error, LakeFSUnavailableError) and error.status == 503 and error.operation == "get_commit"
    lakefence_controls.clear_faults()
    assert repo.branch("main").get_commit().id == input_commit
    assert staging_branches(repo) == []


# Depth 1,000 (and 10,000 objects) is the cost contract's (test_cost_contract.py::test_merge), built
# through its uncounted back door; this direct-mode check only needs to see that history adds nothing.
@pytest.mark.parametrize("history", [1, 100])
def test_call_counts_of_a_direct_merge_publish(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any, history: int
) -> None:
    repo, _ = seeded
    # The run state's branch exists (as after a repository's first record); its record is an uploadObject.
    repo.branch(RUN_STATE_BRANCH).create("main", hidden=True)
    for n in range(history - 1):
        repo.branch("main").commit(f"history {n}", allow_empty=True)
    input_commit = repo.branch("main").get_commit().id
    before: dict[str, int] = {}
    failpoints.arm("after_job", lambda: before.update(lakefence_controls.counts()))
    lakefence_controls.reset_counts()
    dr = run_dag(dags.direct_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A", "out/b.txt": "B"}}))
    assert dr.state == "success"
    total = {k: v for k, v in lakefence_controls.counts().items() if k != "uploadObject"}  # the job's own writes
    before.pop("uploadObject", None)
    after = {k: v - before.get(k, 0) for k, v in total.items() if v - before.get(k, 0)}
    assert before == {"getCommit": 1, "createBranch": 1}
    assert after == {"commit": 1, "getCommit": 2, "mergeIntoBranch": 1, "deleteBranch": 1}
    assert sum(total.values()) <= 8 and sum(after.values()) <= 5


def test_secret_never_reaches_argv_xcom_metadata_or_errors(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefs_conn: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    repo, input_commit = seeded
    secret = lakefs_conn["password"]
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"dump_argv": True}))
    assert dr.state == "success"
    argv = json.loads(read_text(repo, "main", "debug/argv.json"))
    assert any("spark.lakefence" in a for a in argv) or len(argv) >= 2
    assert read_text(repo, "main", "debug/has_secret.txt") == "True"  # it did reach the job's env
    assert secret not in json.dumps(argv)
    assert secret not in json.dumps(xcoms(dr, "publish"))
    head = repo.branch("main").get_commit()
    assert secret not in json.dumps(head.metadata) + head.message
    failed = run_dag(dags.workspace_dag, publish_conf(repo, "no-such-ref", {"files": {"x": "y"}}))
    assert failed.state == "failed"
    error = dags.FAILURES[("lf_test_workspace", 1)]
    assert isinstance(error, InputRefError) and secret not in str(error) and secret not in repr(error.__cause__)
    out, err = capfd.readouterr()
    assert secret not in out + err
