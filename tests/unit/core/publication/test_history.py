"""The publication history rows (core/publication/history.py) from plain values: decisions, what
replaced what, evidence kept or deleted, and the judgement now, which is the abandoned sensor's."""

from __future__ import annotations

from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.names.staging_names import staging_branch_name
from airflow_lakefence.core.ports import CommitInfo
from airflow_lakefence.core.publication.history import TaskInstanceFacts, commits_to_read, history_rows
from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, LakeFenceRecord, encode_metadata
from airflow_lakefence.core.records.run_state import (
    MemoryRunState,
    pin_input,
    record_evidence,
    record_publication,
)

KEY = PublicationKey("d", "r1", "t", -1)
INPUT = "i" * 64


def _publication(try_number: int, commit_id: str, staged: str) -> CommitInfo:
    record = LakeFenceRecord(AttemptId(KEY, try_number, f"ti{try_number}"), ROLE_PUBLISH, INPUT, staged)
    return CommitInfo(commit_id, (INPUT, staged), encode_metadata(record), 1)


def _facts(try_number: int, state: str, output_ref: str | None = None, **kwargs: object) -> TaskInstanceFacts:
    return TaskInstanceFacts(KEY, try_number, state, "repo", "main", output_ref, **kwargs)  # type: ignore[arg-type]


def test_a_first_try_merge_that_succeeded_is_live() -> None:
    state = MemoryRunState()
    pin_input(state, "main", INPUT)
    record_publication(state, "p1", 1, "merge")
    commits = {"p1": _publication(1, "p1", "s1")}
    assert commits_to_read(state.values) == ["p1"]
    (row,) = history_rows(_facts(1, "success", "p1"), state.values, commits, [])
    assert (row.decision, row.output_ref, row.staged_commit, row.input_commit, row.input_ref) == (
        "merge",
        "p1",
        "s1",
        INPUT,
        "main",
    )
    assert row.judgement_label == "live" and row.current


def test_a_cleared_success_replaced_by_its_next_try_is_superseded_and_named() -> None:
    state = MemoryRunState()
    record_publication(state, "p1", 1, "merge")
    record_publication(state, "p2", 2, "replace")
    commits = {"p1": _publication(1, "p1", "s1"), "p2": _publication(2, "p2", "s2")}
    newest, oldest = history_rows(_facts(2, "success", "p2"), state.values, commits, [])
    assert (newest.try_number, newest.decision, newest.replaced) == (
        2,
        "replace",
        {"output_ref": "p1", "try_number": 1},
    )
    assert newest.judgement_label == "live"
    assert (oldest.superseded_by, oldest.judgement) == (2, "abandoned")  # the sensor's word for it off HEAD


def test_a_cleared_success_waiting_for_its_new_try_is_superseded() -> None:
    state = MemoryRunState()
    record_publication(state, "p1", 1, "merge")
    (row,) = history_rows(_facts(1, "scheduled", "p1"), state.values, {"p1": _publication(1, "p1", "s1")}, [])
    assert row.judgement_label == "superseded"


def test_a_publication_whose_task_failed_is_abandoned() -> None:
    state = MemoryRunState()
    record_publication(state, "p1", 1, "merge")
    (row,) = history_rows(_facts(1, "failed"), state.values, {"p1": _publication(1, "p1", "s1")}, [])
    assert row.judgement_label == "abandoned" and "failed" in (row.judgement_reason or "")


def test_a_fail_closed_try_shows_its_evidence_kept_or_deleted() -> None:
    state = MemoryRunState()
    kept = staging_branch_name(AttemptId(KEY, 1, "ti1"))
    gone = staging_branch_name(AttemptId(KEY, 2, "ti2"))
    record_evidence(state, kept, "PublishFenceError", AttemptId(KEY, 1, "ti1"), INPUT)
    record_evidence(state, gone, "OutputPrefixError", AttemptId(KEY, 2, "ti2"), INPUT)
    second, first = history_rows(_facts(2, "failed"), state.values, {}, [(kept, "c1")])
    assert (first.decision, second.decision) == ("fail_closed", "fail_closed")
    assert [(e.branch, e.error, e.kept, e.head) for e in first.evidence] == [(kept, "PublishFenceError", True, "c1")]
    assert [(e.error, e.kept) for e in second.evidence] == [("OutputPrefixError", False)]
    assert first.input_commit == INPUT and "OutputPrefixError" in second.reason


def test_a_try_that_reported_nothing_is_unreported() -> None:
    state = MemoryRunState()
    record_publication(state, "p2", 2, "replace")
    rows = history_rows(_facts(2, "success", "p2"), state.values, {"p2": _publication(2, "p2", "s2")}, [])
    assert [(r.try_number, r.decision) for r in rows] == [(2, "replace"), (1, "unreported")]
    assert rows[0].replaced is None  # the killed try reported nothing: what it published is not named


def test_a_gone_commit_shows_without_details_or_judgement() -> None:
    state = MemoryRunState()
    record_publication(state, "p1", 1, "merge")
    (row,) = history_rows(_facts(1, "success", "p1"), state.values, {}, [])
    assert (row.output_ref, row.staged_commit, row.judgement) == ("p1", None, None)
