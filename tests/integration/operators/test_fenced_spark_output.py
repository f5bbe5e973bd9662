"""Exactly the job's output, once.

Re-runs replace the declared output prefixes; the input is pinned once per run; lost answers lose
nothing and write nothing twice; evidence is kept on every fail-closed path; a deliberate clear of a
successful try supersedes (not abandons) its publication; fail-closed messages say what to do;
mapped instances into one target fail before their job.

Real Airflow DB and ``dag.test()``, real HTTP to lakeFS through the SDK; the Spark engine is the
fake spark-submit (JVM skipped). Faults use the ``lakefence_controls`` fixture API (the fault proxy in
front of either lakeFS backend).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import lakefs
import pytest
import structlog.testing

from airflow_lakefence import exceptions, failpoints
from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.names.staging_names import staging_branch_name
from airflow_lakefence.core.publication.abandonment import DETECT, Verdict, condition_met
from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, LakeFenceRecord, decode_metadata, encode_metadata
from airflow_lakefence.exceptions import PublishFenceError, StaleAttemptError
from airflow_lakefence.hooks.lakefs import LakeFSHook
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from airflow_lakefence.lakefs_adapter.run_state_store import read_run_state
from airflow_lakefence.triggers.probes import probe_abandoned
from tests.conftest import fresh_dag_module
from tests.integration.helpers import (
    commit_files,
    die_after_publishing,
    publish_conf,
    read_text,
    run_dag,
    run_existing,
    staging_branches,
    ti_state,
    xcoms,
)

pytestmark = [pytest.mark.output_correctness, pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")]

PREFIX = "tables/daily/"


@pytest.fixture
def dags() -> Any:
    return fresh_dag_module("testdags/output_correctness_dags.py")


def objects(repo: lakefs.Repository, ref: str, prefix: str) -> list[str]:
    return sorted(o.path for o in repo.ref(ref).objects(prefix=prefix))


def failure(dags: Any, dag: Any, try_number: int = 1, map_index: int = -1) -> BaseException:
    return dags.FAILURES[(dag.dag_id, map_index, try_number)]


def task_state(repo: lakefs.Repository, dag_run: Any, task_id: str = "publish") -> dict[str, Any]:
    """The run state of a task instance, {record key: value} (its records in lakeFS)."""
    config = repo._client.config  # the SDK client the repository was opened with
    client = LakeFSClient(config.host.removesuffix("/api/v1"), config.username, config.password)
    return read_run_state(client, repo.id, PublicationKey(dag_run.dag_id, dag_run.run_id, task_id, -1))


def evidence_records(repo: lakefs.Repository, dag_run: Any) -> list[dict[str, Any]]:
    """The run state's evidence entries, by record key."""
    return [value for key, value in sorted(task_state(repo, dag_run).items()) if key.startswith("evidence/")]


def running_key(dag_id: str) -> PublicationKey:
    """The publication key of the running task instance of ``dag_id``."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=dag_id, state="running").one()
        return PublicationKey(ti.dag_id, ti.run_id, ti.task_id, ti.map_index)


def clear_and_rerun(
    dag: Any, dag_run: Any, task_id: str | list[str] = "publish", *, forget_task_state: bool = False
) -> Any:
    """Clear finished task instances (a new try, as the UI's "Clear" does; one task id or several)
    and run them under the same dag.test() loop; return the refreshed DagRun. ``forget_task_state``:
    the clear also deletes the tasks' own state (Airflow's ``task_state_store``), as a later Airflow plans to."""
    from airflow.models.taskinstance import TaskInstance, clear_task_instances
    from airflow.utils.session import create_session

    with create_session() as session:
        task_ids = [task_id] if isinstance(task_id, str) else task_id
        tis = (
            session.query(TaskInstance)
            .filter(TaskInstance.dag_id == dag.dag_id, TaskInstance.run_id == dag_run.run_id)
            .filter(TaskInstance.task_id.in_(task_ids))
            .all()
        )
        if forget_task_state:
            try:
                from airflow.models.task_state_store import TaskStateStoreModel
            except ImportError:  # before Airflow 3.3 a task has no state of its own to delete
                TaskStateStoreModel = None
            if TaskStateStoreModel is not None:
                session.query(TaskStateStoreModel).filter(
                    TaskStateStoreModel.dag_id == dag.dag_id,
                    TaskStateStoreModel.run_id == dag_run.run_id,
                    TaskStateStoreModel.task_id.in_(task_ids),
                ).delete()
        clear_task_instances(tis, session)
    return run_existing(dag, dag_run.run_id)


class DbView:
    """The sensors' AirflowView answered from the metadata DB (the test process is no task)."""

    def task_states(self, dag_id: str, task_ids: list[str], run_ids: list[str] | None = None) -> Any:
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session

        with create_session() as session:
            query = session.query(TaskInstance).filter(
                TaskInstance.dag_id == dag_id, TaskInstance.task_id.in_(task_ids)
            )
            if run_ids:
                query = query.filter(TaskInstance.run_id.in_(run_ids))
            answer: dict[str, dict[str, Any]] = {}
            for ti in query:
                name = ti.task_id if ti.map_index < 0 else f"{ti.task_id}_{ti.map_index}"
                answer.setdefault(ti.run_id, {})[name] = ti.state
            return answer

    def output_ref(self, key: PublicationKey) -> Any:
        return self.xcom(key, "output_ref")

    def supersedes(self, key: PublicationKey) -> Any:
        return self.xcom(key, "supersedes")

    def evidence(self, key: PublicationKey) -> Any:
        return self.xcom(key, "evidence")

    def xcom(self, key: PublicationKey, name: str) -> Any:
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session

        with create_session() as session:
            row = (
                session.query(XComModel)
                .filter_by(dag_id=key.dag_id, run_id=key.run_id, task_id=key.task_id, map_index=key.map_index, key=name)
                .one_or_none()
            )
            return None if row is None else XComModel.deserialize_value(row)


def judge_head(repo: lakefs.Repository) -> Any:
    return probe_abandoned(
        LakeFSHook().client, DbView(), repository=repo.id, branch="main", scope=None, staging_prefix="lakefence"
    )


# -- 1. declared output prefixes are replaced, not appended ----------------------------------------


def test_three_reruns_leave_exactly_one_runs_files(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, _ = seeded
    commit_files(repo, "main", {f"{PREFIX}old-part.txt": "from before"}, "an older publication")
    for n in range(3):
        job = {"files": {f"{PREFIX}part-{n}.txt": str(n), f"{PREFIX}sub/part-{n}.txt": str(n)}}
        dr = run_dag(dags.workspace_dag, publish_conf(repo, "main", job, output_prefixes=[PREFIX]))
        assert dr.state == "success"
    assert objects(repo, "main", PREFIX) == [f"{PREFIX}part-2.txt", f"{PREFIX}sub/part-2.txt"]
    assert read_text(repo, "main", "in/data.txt") == "input"  # outside the prefixes: untouched


def test_upsert_option_keeps_earlier_files(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, _ = seeded
    for n in range(2):
        dr = run_dag(
            dags.upsert_dag,
            publish_conf(repo, "main", {"files": {f"{PREFIX}part-{n}.txt": str(n)}}, output_prefixes=[PREFIX]),
        )
        assert dr.state == "success"
    assert objects(repo, "main", PREFIX) == [f"{PREFIX}part-0.txt", f"{PREFIX}part-1.txt"]


def test_direct_mode_replaces_declared_prefix(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, _ = seeded
    commit_files(repo, "main", {f"{PREFIX}old-part.txt": "old", "other/keep.txt": "k"}, "older")
    dr = run_dag(
        dags.direct_dag,
        publish_conf(repo, "main", {"files": {f"{PREFIX}new-part.txt": "new"}}, output_prefixes=[PREFIX]),
    )
    assert dr.state == "success"
    assert objects(repo, "main", PREFIX) == [f"{PREFIX}new-part.txt"]
    assert read_text(repo, "main", "other/keep.txt") == "k"


# -- 2. the input is pinned once per run ------------------------------------------------------------


def test_branch_input_pinned_across_a_retry_after_crash(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    die_after_publishing(repo)
    dr = run_dag(dags.workspace_retry_dag, publish_conf(repo, "main", {"stamp_path": "out/stamp.txt"}))
    assert dr.state == "success" and ti_state(dr, "publish") == ("success", 2)
    values = xcoms(dr, "publish")
    head = repo.branch("main").get_commit()
    assert values["input_ref"] == input_commit
    assert values["decision"] == "replace"
    assert head.id == values["output_ref"] and head.parents == [input_commit]
    assert "-t2-" in read_text(repo, "main", "out/stamp.txt")
    pins = [v for k, v in task_state(repo, dr).items() if k.startswith("pin/")]
    assert pins and pins[0]["commit"] == input_commit and pins[0]["ref"] == "main"


def test_tag_input_pinned_even_when_the_tag_moves(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    repo.tag("daily").create(input_commit)

    def move_tag() -> None:
        repo.tag("daily").delete()
        repo.tag("daily").create(repo.branch("main").get_commit().id)

    die_after_publishing(repo, also=move_tag)
    dr = run_dag(dags.workspace_retry_dag, publish_conf(repo, "daily", {"stamp_path": "out/stamp.txt"}))
    assert dr.state == "success"
    values = xcoms(dr, "publish")
    assert values["input_ref"] == input_commit and values["decision"] == "replace"
    assert repo.branch("main").get_commit().parents == [input_commit]


# -- 3. lost answers lose nothing and write nothing twice -------------------------------------------


def test_lost_staging_commit_answer_still_publishes(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    lakefence_controls.add_fault("commit", drop=True, when="after")
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    values = xcoms(dr, "publish")
    assert dr.state == "success", failure(dags, dags.workspace_dag)
    assert values["decision"] == "merge"
    assert read_text(repo, "main", "out/a.txt") == "A"
    assert values["staged_commit"] != input_commit


LOST_AFTER = 3.0  # the client's read timeout (s) in the late-landing test: an answer held longer is lost


@pytest.fixture
def short_read_timeout(lakefs_conn: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The lakeFS connection with a short read timeout (extra ``timeout``)."""
    conn = {**lakefs_conn, "extra": json.dumps({"timeout": [5, LOST_AFTER]})}
    monkeypatch.setenv("AIRFLOW_CONN_LAKEFS_DEFAULT", json.dumps(conn))


def test_lost_staging_commit_landing_after_the_reread_is_found_by_its_record(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any, short_read_timeout: None
) -> None:
    """Round 1's staging commit is held by the proxy past the client's read timeout (its answer is
    lost); the engine re-reads the staging branch (nothing there yet) and commits again; round 1's
    request reaches lakeFS just before round 2's, which lakeFS answers "no changes". The staged
    commit is round 1's, found by its record on the branch's HEAD: no empty commit on top."""
    repo, input_commit = seeded
    round_2_sent, round_1_landed = threading.Event(), threading.Event()
    order: list[str] = []

    def hold_round_1(_call: Any) -> None:  # the proxy's thread; the client gives up meanwhile
        assert round_2_sent.wait(60), "round 2 never came"
        order.append("round 1 sent on")

    def round_1_done(call: Any) -> None:
        order.append(f"round 1 landed: {call.status}")
        round_1_landed.set()

    def hold_round_2(_call: Any) -> None:
        order.append("round 2 sent")
        round_2_sent.set()
        assert round_1_landed.wait(60), "round 1 never landed"

    lakefence_controls.add_fault("commit", nth=1, when="before", hook=hold_round_1)
    lakefence_controls.add_fault("commit", nth=1, when="after", hook=round_1_done)
    lakefence_controls.add_fault("commit", nth=2, when="before", hook=hold_round_2)
    lakefence_controls.reset_counts()
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success", failure(dags, dags.workspace_dag)
    assert lakefence_controls.faults() == []
    assert order == ["round 2 sent", "round 1 sent on", "round 1 landed: 201"]
    assert lakefence_controls.counts()["commit"] == 2  # no third (empty) commit
    values = xcoms(dr, "publish")
    staged = repo.commit(values["staged_commit"]).get_commit()
    assert staged.parents == [input_commit]  # round 1's commit itself
    record = decode_metadata(staged.metadata)
    assert record is not None and record.role == "stage" and record.attempt.try_number == 1
    head = repo.branch("main").get_commit()
    assert values["decision"] == "merge" and values["output_ref"] == head.id
    assert head.parents == [input_commit, staged.id]
    assert read_text(repo, "main", "out/a.txt") == "A"
    assert staging_branches(repo) == []


def test_direct_job_that_commits_itself_is_published(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    dr = run_dag(dags.direct_commit_dag, publish_conf(repo, input_commit, {"files": {"out/committed.txt": "C"}}))
    assert dr.state == "success", failure(dags, dags.direct_commit_dag)
    values = xcoms(dr, "publish")
    assert values["decision"] == "merge"
    assert read_text(repo, "main", "out/committed.txt") == "C"
    head = repo.branch("main").get_commit()
    assert head.parents[0] == input_commit
    staged = repo.commit(values["staged_commit"]).get_commit()
    assert decode_metadata(staged.metadata) is not None  # the attempt's record stays on the staged commit


def test_merge_landing_late_is_idempotent(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    lakefence_controls.add_fault("mergeIntoBranch", status=503)  # round 1: refused, answer unknown
    rounds: list[int] = []

    def first_request_lands_now() -> None:
        rounds.append(1)
        if len(rounds) != 2:
            return
        # Round 2 read HEAD == input; the first request now lands after all (late).
        staging = next(b for b in staging_branches(repo))
        stage = decode_metadata(repo.branch(staging).get_commit().metadata)
        assert stage is not None
        staged = repo.branch(staging).get_commit().id
        meta = encode_metadata(LakeFenceRecord(stage.attempt, ROLE_PUBLISH, input_commit, staged))
        repo.ref(staged).merge_into(repo.branch("main"), message="late", metadata=meta)

    failpoints.arm("after_publish_read", first_request_lands_now)
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success", failure(dags, dags.workspace_dag)
    head = repo.branch("main").get_commit()
    values = xcoms(dr, "publish")
    assert values["decision"] == "idempotent" and values["output_ref"] == head.id
    assert head.parents[0] == input_commit
    assert staging_branches(repo) == []


def test_fence_rechecked_before_each_publish_round(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    lakefence_controls.add_fault("mergeIntoBranch", status=503)
    rounds: list[int] = []

    def cleared_between_rounds() -> None:
        rounds.append(1)
        if len(rounds) == 1:
            from tests.integration.helpers import update_ti

            update_ti("lf13_workspace", "publish", clear=True)

    # The clear lands after round 1's read (its merge is refused), before round 2 writes.
    failpoints.arm("after_publish_read", cleared_between_rounds)
    run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert isinstance(failure(dags, dags.workspace_dag), StaleAttemptError)
    assert lakefence_controls.counts()["mergeIntoBranch"] == 1
    assert repo.branch("main").get_commit().id == input_commit


# -- 4. evidence on every fail-closed path ----------------------------------------------------------


def _assert_kept_as_evidence(repo: lakefs.Repository, branch: str, error: str) -> None:
    assert branch in staging_branches(repo)
    assert repo.branch(branch).get_commit().metadata.get("lakefence.evidence") == error


def test_fail_closed_before_the_job_keeps_xcom_and_lakefs_consistent(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    foreign = commit_files(repo, "main", {"other.txt": "x"}, "someone else")
    lakefence_controls.reset_counts()
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "failed"
    error = failure(dags, dags.workspace_dag)
    # The target's HEAD rules out every publication before the job: the try fails there, runs nothing,
    # deletes its (empty) staging branch and names none in XCom (nothing to link to, nothing kept).
    assert type(error) is PublishFenceError and str(error).startswith("before the job, nothing was run: ")
    assert error.staging_branch is None
    assert "staging_branch" not in xcoms(dr, "publish")
    assert staging_branches(repo) == []
    assert lakefence_controls.counts().get("uploadObject", 0) == 0  # the job never ran: nothing uploaded
    assert repo.branch("main").get_commit().id == foreign


def test_output_prefix_error_in_workspace_mode_keeps_what_the_job_wrote(
    dags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = seeded
    job = {"files": {f"{PREFIX}ok.txt": "1", "elsewhere/bad.txt": "2"}}
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, job, output_prefixes=[PREFIX]))
    assert dr.state == "failed"
    error = failure(dags, dags.workspace_dag)
    assert isinstance(error, exceptions.OutputPrefixError) and error.staging_branch
    _assert_kept_as_evidence(repo, error.staging_branch, "OutputPrefixError")
    assert read_text(repo, error.staging_branch, "elsewhere/bad.txt") == "2"
    assert xcoms(dr, "publish")["staging_branch"] == error.staging_branch
    assert repo.branch("main").get_commit().id == input_commit


def _merge_answers(status: int, dags: Any, seeded: tuple[lakefs.Repository, str], controls: Any) -> Any:
    """Publish ``out/a.txt`` while lakeFS answers the merge with ``status``; return the failed try's error."""
    repo, input_commit = seeded
    controls.add_fault("mergeIntoBranch", status=status)
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "failed"
    return failure(dags, dags.workspace_dag)


def test_pre_merge_hook_rejection_is_its_own_error_and_keeps_evidence(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    error = _merge_answers(412, dags, seeded, lakefence_controls)
    assert type(error).__name__ == "MergeHookRejectedError", repr(error)
    assert isinstance(error, PublishFenceError) and error.staging_branch
    assert "hook" in str(error) and "What to do:" in str(error)
    _assert_kept_as_evidence(repo, error.staging_branch, "MergeHookRejectedError")
    assert repo.branch("main").get_commit().id == input_commit


REJECT_ACTION = """\
name: lakefence test rejects every merge
on:
  pre-merge:
    branches: [main]
hooks:
  - id: reject_all
    type: lua
    properties:
      script: |
        error("rejected by the output-correctness test hook")
"""


@pytest.mark.real_lakefs
def test_real_pre_merge_hook_rejection_names_the_hook_run(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, _ = seeded
    input_commit = commit_files(repo, "main", {"_lakefs_actions/reject.yaml": REJECT_ACTION}, "install the hook")
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "failed"
    error = failure(dags, dags.workspace_dag)
    assert type(error).__name__ == "MergeHookRejectedError", repr(error)
    run_id = getattr(error.__cause__, "run_id", None)
    assert run_id and run_id in str(error)
    assert "rejected by the output-correctness test hook" in str(error)
    _assert_kept_as_evidence(repo, error.staging_branch, "MergeHookRejectedError")  # type: ignore[attr-defined]


def test_merge_400_other_than_dirty_keeps_evidence(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    error = _merge_answers(400, dags, seeded, lakefence_controls)
    branch = getattr(error, "staging_branch", None)
    assert branch, repr(error)
    _assert_kept_as_evidence(repo, branch, type(error).__name__)
    assert "What to do:" in str(error)
    assert repo.branch("main").get_commit().id == input_commit


def test_evidence_marker_commit_is_retried(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    failpoints.arm("after_job", lambda: commit_files(repo, "main", {"other.txt": "x"}, "racer"))
    # The racer's commit is commit call 1, the stage commit 2, the first marker attempt 3.
    lakefence_controls.add_fault("commit", nth=3, status=503)
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "failed"
    error = failure(dags, dags.workspace_dag)
    assert isinstance(error, PublishFenceError) and error.staging_branch
    _assert_kept_as_evidence(repo, error.staging_branch, "PublishFenceError")


def _refuse_merges_and_markers(lakefence_controls: Any, merges: int, markers: int) -> None:
    """The first ``merges`` merges are refused (400: each try fails closed at publish time and keeps
    its staging branch); commit 1 is try 1's stage commit, the next ``markers`` commits fail (503):
    try 1's three marker tries, then try 2's three re-marking tries."""
    for nth in range(1, merges + 1):
        lakefence_controls.add_fault("mergeIntoBranch", nth=nth, status=400)
    for nth in range(2, 2 + markers):
        lakefence_controls.add_fault("commit", nth=nth, status=503)


def _assert_unmarked_stage_of_try_1(repo: lakefs.Repository, branch: str, input_commit: str) -> None:
    head = repo.branch(branch).get_commit()
    assert "lakefence.evidence" not in head.metadata
    record = decode_metadata(head.metadata)
    assert record is not None and record.role == "stage" and record.attempt.try_number == 1
    assert head.parents == [input_commit]


def test_unmarked_evidence_is_never_deleted_by_retries_or_the_cleaner(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    # Try 1 fails closed and cannot mark its branch (recorded in the run state only); try 2 reaches
    # the clean-up of earlier tries, cannot re-mark it either, and fails closed too.
    _refuse_merges_and_markers(lakefence_controls, merges=2, markers=6)
    lakefence_controls.reset_counts()
    dr = run_dag(dags.workspace_retry_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "failed" and ti_state(dr, "publish") == ("failed", 2)
    first = failure(dags, dags.workspace_retry_dag, 1)
    second = failure(dags, dags.workspace_retry_dag, 2)
    assert type(first) is PublishFenceError and type(second) is PublishFenceError, (first, second)
    assert first.staging_branch and second.staging_branch and first.staging_branch != second.staging_branch
    # Every fault fired: try 2 listed the earlier tries' branches and tried to re-mark try 1's.
    assert lakefence_controls.faults() == []
    assert lakefence_controls.counts()["listBranches"] == 1
    recorded = {item["branch"] for item in evidence_records(repo, dr)}
    assert recorded == {first.staging_branch, second.staging_branch}
    # Try 1's branch survived try 2's clean-up, unmarked, with what try 1 staged.
    _assert_unmarked_stage_of_try_1(repo, first.staging_branch, input_commit)
    assert read_text(repo, first.staging_branch, "out/a.txt") == "A"
    _assert_kept_as_evidence(repo, second.staging_branch, "PublishFenceError")
    assert repo.branch("main").get_commit().id == input_commit
    # The cleaner keeps a staged, unmarked branch of a task instance that did not succeed.
    cleaned = run_dag(dags.clean_dag, {"repository": repo.id})
    assert cleaned.state == "success"
    assert sorted(staging_branches(repo)) == sorted([first.staging_branch, second.staging_branch])
    _assert_unmarked_stage_of_try_1(repo, first.staging_branch, input_commit)


def test_a_retry_re_marks_evidence_recorded_only_in_the_run_state(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    # Try 1 fails closed and cannot mark its branch; try 2 spares it, re-marks it, and publishes.
    _refuse_merges_and_markers(lakefence_controls, merges=1, markers=3)
    dr = run_dag(dags.workspace_retry_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success", failure(dags, dags.workspace_retry_dag, 2)
    assert ti_state(dr, "publish") == ("success", 2)
    assert lakefence_controls.faults() == []
    first = failure(dags, dags.workspace_retry_dag, 1)
    assert type(first) is PublishFenceError and first.staging_branch
    assert [item["branch"] for item in evidence_records(repo, dr)] == [first.staging_branch]
    # The marker commit try 2 wrote: on top of try 1's stage commit, naming try 1 and its error.
    marker = repo.branch(first.staging_branch).get_commit()
    assert marker.metadata.get("lakefence.evidence") == "PublishFenceError"
    marked = decode_metadata(marker.metadata)
    assert marked is not None and marked.attempt.try_number == 1 and marked.input_ref == input_commit
    (stage_commit,) = marker.parents
    _assert_unmarked_stage_of_try_1(repo, stage_commit, input_commit)
    # Try 2 published its own staged commit; try 1's branch is the only one left, and the cleaner
    # keeps it (marked evidence), although the task instance succeeded.
    values = xcoms(dr, "publish")
    head = repo.branch("main").get_commit()
    assert values["decision"] == "merge" and values["output_ref"] == head.id
    assert head.parents == [input_commit, values["staged_commit"]]
    assert staging_branches(repo) == [first.staging_branch]
    assert run_dag(dags.clean_dag, {"repository": repo.id}).state == "success"
    assert staging_branches(repo) == [first.staging_branch]


#: Try 1 writes outside output_prefixes (OutputPrefixError after its uploads, before any commit);
#: every later try writes inside only.
_OUTSIDE_ON_TRY_1 = {"files": {f"{PREFIX}ok.txt": "1"}, "first_try_files": {"elsewhere/bad.txt": "2"}}


def _fail_commits(lakefence_controls: Any, first: int, count: int) -> None:
    """Commits ``first`` .. ``first + count - 1`` (from now on) fail with 503."""
    for nth in range(first, first + count):
        lakefence_controls.add_fault("commit", nth=nth, status=503)


def _clean(dags: Any, repo: lakefs.Repository) -> dict[str, dict[str, Any]]:
    """Run the cleaner DAG; return its ``kept`` entries by branch."""
    cleaned = run_dag(dags.clean_dag, {"repository": repo.id})
    assert cleaned.state == "success"
    return {entry["branch"]: entry for entry in xcoms(cleaned, "clean")["return_value"]["kept"]}


@pytest.mark.parametrize("input_kind", ["plain_commit", "publication"])
def test_a_retry_re_marks_unstaged_evidence_as_the_attempt_that_kept_it(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any, input_kind: str
) -> None:
    repo, input_commit = seeded
    if input_kind == "publication":
        # The input is itself a publication (of another DAG's try): the record on the kept branch's
        # HEAD (the input) is that try's, not the record of the attempt that kept the branch.
        assert (
            run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"in/p.txt": "p"}})).state
            == "success"
        )
        input_commit = repo.branch("main").get_commit().id
        assert decode_metadata(repo.ref(input_commit).get_commit().metadata) is not None
    # Try 1 uploads, fails closed before staging (OutputPrefixError) and cannot mark its branch: it is
    # kept with HEAD still at the input and the uploads uncommitted. Try 2 re-marks it and publishes.
    _fail_commits(lakefence_controls, 1, 3)
    dr = run_dag(
        dags.workspace_retry_dag, publish_conf(repo, input_commit, _OUTSIDE_ON_TRY_1, output_prefixes=[PREFIX])
    )
    assert dr.state == "success", failure(dags, dags.workspace_retry_dag, 2)
    assert lakefence_controls.faults() == []
    first = failure(dags, dags.workspace_retry_dag, 1)
    assert isinstance(first, exceptions.OutputPrefixError) and first.staging_branch
    kept = first.staging_branch
    # The marker names the attempt that kept the branch (from the run state's record, not from HEAD).
    marker = repo.branch(kept).get_commit()
    assert marker.metadata.get("lakefence.evidence") == "OutputPrefixError"
    marked = decode_metadata(marker.metadata)
    assert marked is not None and marked.role == "stage" and marked.input_ref == input_commit
    assert marked.attempt.try_number == 1 and staging_branch_name(marked.attempt) == kept
    assert marker.parents == [input_commit]
    assert read_text(repo, kept, "elsewhere/bad.txt") == "2"  # what try 1 uploaded, committed by the marker
    assert list(repo.branch(kept).uncommitted()) == []
    # The cleaner keeps it (marked evidence), although the task instance succeeded.
    assert staging_branches(repo) == [kept]
    assert _clean(dags, repo)[kept]["evidence"] == "OutputPrefixError"
    assert staging_branches(repo) == [kept]
    # XCom names the evidence the run kept.
    assert xcoms(dr, "publish")["evidence"] == {kept: "OutputPrefixError"}


@pytest.mark.parametrize("when", ["at_publish", "before_staging"])
def test_evidence_no_try_could_mark_is_kept_by_the_cleaner_after_a_retry_succeeded(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any, when: str
) -> None:
    repo, input_commit = seeded
    if when == "at_publish":
        # Try 1 stages, is refused at publish time (400) and cannot mark its staged branch.
        _refuse_merges_and_markers(lakefence_controls, merges=1, markers=6)
        job, prefixes, path, text = {"files": {"out/a.txt": "A"}}, None, "out/a.txt", "A"
    else:
        # Try 1 fails closed before staging (its uploads stay uncommitted) and cannot mark its branch.
        _fail_commits(lakefence_controls, 1, 6)
        job, prefixes, path, text = _OUTSIDE_ON_TRY_1, [PREFIX], "elsewhere/bad.txt", "2"
    # Try 2 cannot re-mark it either (three more 503s), then publishes: the task instance succeeds.
    dr = run_dag(dags.workspace_retry_dag, publish_conf(repo, input_commit, job, output_prefixes=prefixes))
    assert dr.state == "success", failure(dags, dags.workspace_retry_dag, 2)
    assert ti_state(dr, "publish") == ("success", 2)
    assert lakefence_controls.faults() == []
    first = failure(dags, dags.workspace_retry_dag, 1)
    assert isinstance(first, PublishFenceError) and first.staging_branch
    kept, error = first.staging_branch, type(first).__name__
    assert "lakefence.evidence" not in repo.branch(kept).get_commit().metadata
    # The cleaner never deletes it: its last try named it as the run's evidence, unmarked.
    assert staging_branches(repo) == [kept]
    entry = _clean(dags, repo)[kept]
    assert entry["evidence"] is None and "could not be written" in entry["reason"], entry
    assert staging_branches(repo) == [kept]
    assert read_text(repo, kept, path) == text
    assert xcoms(dr, "publish")["evidence"] == {kept: error}


def test_unstaged_evidence_no_try_could_mark_is_kept_by_the_cleaner(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    # No retry: try 1 fails closed before staging and cannot mark its branch; the task instance fails.
    _fail_commits(lakefence_controls, 1, 3)
    job = {"files": {f"{PREFIX}ok.txt": "1", "elsewhere/bad.txt": "2"}}
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, job, output_prefixes=[PREFIX]))
    assert dr.state == "failed" and lakefence_controls.faults() == []
    error = failure(dags, dags.workspace_dag)
    assert isinstance(error, exceptions.OutputPrefixError) and error.staging_branch
    kept = error.staging_branch
    assert repo.branch(kept).get_commit().id == input_commit  # unstaged, unmarked
    assert xcoms(dr, "publish")["staging_branch"] == kept
    # Its task instance is dead and the branch is unstaged, but it holds uncommitted changes: kept.
    entry = _clean(dags, repo)[kept]
    assert entry["evidence"] is None and "uncommitted" in entry["reason"], entry
    assert staging_branches(repo) == [kept]
    assert read_text(repo, kept, "elsewhere/bad.txt") == "2"
    assert xcoms(dr, "publish")["evidence"] == {kept: "OutputPrefixError"}


# -- 5. superseded is not abandoned -----------------------------------------------------------------


def _fence_lines(logs: list[dict[str, Any]]) -> list[str]:
    """The publish fence's log lines among captured task log events."""
    return [str(e["event"]) for e in logs if str(e.get("event", "")).startswith("Publish fence:")]


def test_clear_of_a_successful_try_supersedes(dags: Any, asset_repo13: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = asset_repo13
    dr = run_dag(dags.assets_dag, publish_conf(repo, "main", {"stamp_path": "out/stamp.txt"}))
    assert dr.state == "success"
    first = repo.branch("main").get_commit().id
    during: list[Any] = []
    failpoints.arm("after_stage", lambda: during.append(judge_head(repo)))
    with structlog.testing.capture_logs() as logs:  # the task log (Airflow's task logger is structlog)
        dr = clear_and_rerun(dags.assets_dag, dr)
    assert dr.state == "success" and ti_state(dr, "publish") == ("success", 2)
    values = xcoms(dr, "publish")
    head = repo.branch("main").get_commit()
    assert head.parents == [input_commit]  # pinned input: replaced, not stacked
    assert values["input_ref"] == input_commit
    assert values["supersedes"] == {"output_ref": first, "try_number": 1}
    assert "supersede" in values["reason"]
    assert _fence_lines(logs) == [
        f"Publish fence: replace (target HEAD {first} is the superseded publication of try 1 (it succeeded; "
        "the task instance was cleared))"
    ]
    # While try 2 ran, the monitoring judgement called HEAD superseded, and raised no alert.
    assert during and during[0].verdict == Verdict("superseded")
    assert not condition_met(DETECT, during[0])
    events = asset_events13()
    assert events[-1]["supersedes"] == first and events[-1]["output_ref"] == head.id


def test_a_clear_that_deletes_the_task_state_neither_loses_the_pin_nor_stacks(
    dags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    """The run state lives in lakeFS: a clear that deletes the task's own Airflow state leaves the
    pin (the branch input resolved once) and the reported publication, so the re-run replaces the
    first publication on the same input instead of stacking a second one on top of it."""
    repo, input_commit = seeded
    dr = run_dag(dags.workspace_retry_dag, publish_conf(repo, "main", {"stamp_path": "out/stamp.txt"}))
    assert dr.state == "success"
    first = repo.branch("main").get_commit().id
    assert first != input_commit
    dr = clear_and_rerun(dags.workspace_retry_dag, dr, forget_task_state=True)
    assert dr.state == "success" and ti_state(dr, "publish") == ("success", 2)
    values = xcoms(dr, "publish")
    head = repo.branch("main").get_commit()
    assert head.parents == [input_commit] and values["input_ref"] == input_commit  # pinned: not stacked
    assert values["decision"] == "replace" and values["supersedes"] == {"output_ref": first, "try_number": 1}
    records = task_state(repo, dr)
    assert [v["commit"] for k, v in records.items() if k.startswith("pin/")] == [input_commit]
    published = [v for k, v in sorted(records.items()) if k.startswith("published/")]
    assert [(p["try_number"], p["output_ref"]) for p in published] == [(1, first), (2, head.id)]


def test_really_abandoned_publication_still_alerts(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, _ = seeded
    during: list[Any] = []
    seen = die_after_publishing(repo)
    failpoints.arm("after_stage", lambda: during.append(judge_head(repo)) if seen else None)
    with structlog.testing.capture_logs() as logs:
        dr = run_dag(dags.workspace_retry_dag, publish_conf(repo, "main", {"stamp_path": "out/stamp.txt"}))
    assert dr.state == "success"
    replaced = f"Publish fence: replace (target HEAD {seen[0]} is an abandoned publication of try 1)"
    assert _fence_lines(logs)[-1] == replaced
    assert during and during[0].verdict is Verdict.ABANDONED and during[0].replacement_running
    assert condition_met(DETECT, during[0])
    assert "supersedes" not in xcoms(dr, "publish")


@pytest.fixture
def asset_repo13(lakefence_client: lakefs.Client, lakefence_server: Any, tmp_path: Any) -> Any:
    repo = lakefs.Repository("lakefence-i13-assets", client=lakefence_client)
    repo.create(storage_namespace=f"{lakefence_server.storage_namespace}/i13-{tmp_path.name}", default_branch="main")
    try:
        yield repo, commit_files(repo, "main", {"in/data.txt": "input"}, "seed input")
    finally:
        repo.delete()


def asset_events13() -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == "lakefs://lakefence-i13-assets/main/out")
        )
        return [dict(row.extra) for row in rows.order_by(AssetEvent.id)]


# -- 6. messages that tell the user what to do ------------------------------------------------------


def test_message_later_run_published_on_top(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, _ = seeded
    day1 = run_dag(dags.workspace_dag, publish_conf(repo, "main", {"stamp_path": "out/stamp.txt"}))
    day2 = run_dag(dags.workspace_dag, publish_conf(repo, "main", {"stamp_path": "out/stamp.txt"}))
    assert day1.state == day2.state == "success"
    top = repo.branch("main").get_commit().id
    dr = clear_and_rerun(dags.workspace_dag, day1)
    assert dr.state == "failed"
    message = str(failure(dags, dags.workspace_dag, 2))
    assert day2.run_id in message and "later run" in message and "What to do:" in message
    assert repo.branch("main").get_commit().id == top


def test_message_another_tasks_publication(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    other = run_dag(dags.direct_dag, publish_conf(repo, input_commit, {"files": {"x/a.txt": "A"}}))
    assert other.state == "success"
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "failed"
    message = str(failure(dags, dags.workspace_dag))
    assert "lf13_direct" in message and "pool" in message and "What to do:" in message


def test_message_foreign_commit(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    foreign = commit_files(repo, "main", {"other.txt": "x"}, "someone else")
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "failed"
    message = str(failure(dags, dags.workspace_dag))
    assert foreign in message and "without a lakefence record" in message and "What to do:" in message


def test_message_target_moved_since_the_input_was_pinned(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    commit_files(repo, "main", {"x1.txt": "1"}, "one")
    commit_files(repo, "main", {"x2.txt": "2"}, "two")
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "failed"
    message = str(failure(dags, dags.workspace_dag))
    assert "moved since the input" in message and input_commit in message and "What to do:" in message


# -- 7. mapped tasks --------------------------------------------------------------------------------


def test_second_mapped_instance_fails_before_its_job(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_server: Any
) -> None:
    repo, input_commit = seeded
    if lakefence_server.controls is not None:
        lakefence_server.controls.reset_counts()
    jobs = [{"files": {"out/m0.txt": "0"}}, {"files": {"out/m1.txt": "1"}}]
    dr = run_dag(dags.mapped_dag, {"repository": repo.id, "target": "main", "input_ref": input_commit, "jobs": jobs})
    assert dr.state == "failed"
    failed = [(k, e) for k, e in dags.FAILURES.items() if k[0] == "lf13_mapped"]
    assert len(failed) == 1
    (_, map_index, _), error = failed[0]
    message = str(error)
    assert "mapped" in message and "What to do:" in message and "pool" in message
    assert not isinstance(error, exceptions.SparkJobError)
    published = objects(repo, "main", "out/")
    assert len(published) == 1 and published != [f"out/m{map_index}.txt"]
    if lakefence_server.controls is not None:  # the failing instance's job never ran: one upload of data
        # ...and the publishing instance's run-state record, the first in this repository: its upload
        # answered 404 (no run-state branch yet), the branch created, the upload sent again.
        counts = lakefence_server.controls.counts()
        assert (counts.get("uploadObject"), counts.get("createBranch")) == (1 + 2, 1 + 1)


# -- 8. the cleaning of earlier tries ---------------------------------------------------------------


def test_retry_never_deletes_a_newer_tries_branch(dags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    newer: list[str] = []

    def newer_try_appears_then_die() -> None:
        if not newer:
            key = running_key("lf13_workspace_retry")
            newer.append(staging_branch_name(AttemptId(key, 3, "a-newer-try")))
            repo.branch(newer[0]).create(input_commit, hidden=True)
            raise RuntimeError("try 1 dies")

    failpoints.arm("after_job", newer_try_appears_then_die)
    run_dag(dags.workspace_retry_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert newer[0] in staging_branches(repo)


def test_failed_cleanup_delete_never_fails_the_attempt(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    died: list[int] = []

    def die_once() -> None:
        if not died:
            died.append(1)
            lakefence_controls.add_fault("deleteBranch", nth=1, status=500)  # try 1's own delete
            lakefence_controls.add_fault("deleteBranch", nth=2, status=500)  # try 2's clean-up of it
            raise RuntimeError("try 1 dies")

    failpoints.arm("after_job", die_once)
    dr = run_dag(dags.workspace_retry_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success", failure(dags, dags.workspace_retry_dag, 2)
    assert ti_state(dr, "publish") == ("success", 2)
    assert read_text(repo, "main", "out/a.txt") == "A"
