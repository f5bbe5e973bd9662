"""The publication history rows (core/publication/history.py) from plain values: decisions, what
replaced what, evidence kept or deleted (with its message), the judgement now, which is the abandoned
sensor's, the publication a try that died before reporting abandoned, and a run-branch publication's
tasks."""

from __future__ import annotations

from airflow_lakefence.core.fences.hard import link_metadata
from airflow_lakefence.core.fences.publish import HeadState
from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.names.staging_names import staging_branch_name
from airflow_lakefence.core.ports import CommitInfo
from airflow_lakefence.core.publication.abandonment import PublisherState, judge
from airflow_lakefence.core.publication.history import (
    DECISION_REASONS,
    DIED_BEFORE_REPORTING,
    TaskInstanceFacts,
    commits_to_read,
    history_rows,
    needs_probe,
    run_publication_of,
    run_tasks_of,
)
from airflow_lakefence.core.publication.run_branches import (
    RUN_BRANCH_METADATA_KEY,
    RUN_HEAD_METADATA_KEY,
    provider_metadata,
)
from airflow_lakefence.core.records.metadata import (
    ROLE_PUBLISH,
    ROLE_STAGE,
    LakeFenceRecord,
    decode_metadata,
    encode_metadata,
)
from airflow_lakefence.core.records.run_state import (
    MESSAGE_LIMIT,
    MemoryRunState,
    bounded_message,
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


def test_a_record_voided_by_its_try_s_evidence_shows_the_fail_closed_try_and_reads_no_commit() -> None:
    """The record goes out beside the merge's verification; when that finds a race, the try keeps
    evidence, and its row is the evidence's, not a publication's."""
    state = MemoryRunState()
    raced = staging_branch_name(AttemptId(KEY, 1, "ti1"))
    record_publication(state, "m1", 1, "merge")
    record_evidence(state, raced, "PublishRaceError", AttemptId(KEY, 1, "ti1"), INPUT, "first parent f, not the input")
    assert commits_to_read(state.values) == []
    (row,) = history_rows(_facts(1, "failed"), state.values, {}, [(raced, "c1")])
    assert (row.decision, row.output_ref) == ("fail_closed", None)
    assert [(e.branch, e.error, e.kept) for e in row.evidence] == [(raced, "PublishRaceError", True)]


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


def _stage(try_number: int, commit_id: str, metadata: dict[str, str] | None = None) -> CommitInfo:
    record = LakeFenceRecord(AttemptId(KEY, try_number, f"ti{try_number}"), ROLE_STAGE, INPUT)
    return CommitInfo(commit_id, (INPUT,), {**encode_metadata(record), **(metadata or {})}, 1)


def test_a_try_that_died_after_publishing_is_named_by_the_record_of_the_try_that_replaced_it() -> None:
    state = MemoryRunState()
    pin_input(state, "main", INPUT)
    record_publication(state, "s2", 2, "replace", replaced="p1")
    assert state.values["published/00000002"]["replaced"] == "p1"
    commits = {"p1": _publication(1, "p1", "s1"), "s2": _stage(2, "s2")}
    assert commits_to_read(state.values) == ["s2", "p1"]
    retry, dead = history_rows(_facts(2, "success", "s2"), state.values, commits, [])
    assert retry.replaced == {"output_ref": "p1", "try_number": 1, "abandoned": True}
    assert (dead.decision, dead.reason, dead.output_ref, dead.staged_commit) == (
        "unreported",
        DIED_BEFORE_REPORTING,
        "p1",
        "s1",
    )
    assert (dead.found_by, dead.superseded_by, dead.input_commit, dead.input_ref) == ("replacing try", 2, INPUT, "main")
    # The sensor's judge(): the task instance stands behind s2, not p1.
    assert dead.judgement_label == "abandoned" and "stands behind 's2'" in (dead.judgement_reason or "")


def test_an_older_record_names_it_through_a_merge_only_replacements_link() -> None:
    state = MemoryRunState()
    record_publication(state, "m2", 2, "replace")  # written before records named what they replaced
    link = _publication(2, "m2", "s2")
    link = CommitInfo("m2", ("p1", "x"), {**link.metadata, **link_metadata("p1", "s2")}, 1)
    # The reader reads only the output: the replaced commit is named, not judged, unless read too.
    rows = history_rows(_facts(2, "success", "m2"), state.values, {"m2": link, "p1": _publication(1, "p1", "s1")}, [])
    assert [(r.try_number, r.decision, r.output_ref, r.found_by) for r in rows] == [
        (2, "replace", "m2", None),
        (1, "unreported", "p1", "replacing try"),
    ]


def test_a_try_that_died_with_no_retry_is_named_by_the_sensors_probe_of_the_target() -> None:
    state = MemoryRunState()
    pin_input(state, "main", INPUT)
    ti = _facts(1, "failed")
    assert needs_probe(ti, state.values)
    head = _publication(1, "p1", "s1")
    record = decode_metadata(head.metadata)
    assert record is not None
    probe = judge(HeadState.of(head), record, PublisherState("failed"))
    (row,) = history_rows(ti, state.values, {}, [], probe)
    assert (row.decision, row.output_ref, row.found_by, row.judgement_label) == (
        "unreported",
        "p1",
        "target",
        "abandoned",
    )
    # Another key's publication at HEAD names nothing.
    other = judge(
        HeadState.of(_other_publication()), decode_metadata(_other_publication().metadata), PublisherState("success")
    )  # type: ignore[arg-type]
    (plain,) = history_rows(ti, state.values, {}, [], other)
    assert (plain.output_ref, plain.reason) == (None, DECISION_REASONS["unreported"])
    # A try that reported needs no probe.
    record_publication(state, "p1", 1, "merge")
    assert not needs_probe(_facts(1, "success", "p1"), state.values)


def _other_publication() -> CommitInfo:
    record = LakeFenceRecord(AttemptId(PublicationKey("d", "r0", "t", -1), 1, "x"), ROLE_PUBLISH, INPUT, "s0")
    return CommitInfo("p0", (INPUT, "s0"), encode_metadata(record), 1)


def test_evidence_shows_its_message_bounded() -> None:
    state = MemoryRunState()
    kept = staging_branch_name(AttemptId(KEY, 1, "ti1"))
    record_evidence(state, kept, "PublishFenceError", AttemptId(KEY, 1, "ti1"), INPUT, "the target moved\n" * 100)
    (row,) = history_rows(_facts(1, "failed"), state.values, {}, [(kept, "c1")])
    (entry,) = row.evidence
    assert entry.message is not None and len(entry.message) == MESSAGE_LIMIT and "\n" not in entry.message
    assert entry.message.startswith("the target moved the target moved")
    assert bounded_message("short  one\n") == "short one"


def _run_commit(commit_id: str, task: str, try_number: int, role: str, parents: tuple[str, ...]) -> CommitInfo:
    key = PublicationKey("d", "r1", task, -1)
    record = LakeFenceRecord(AttemptId(key, try_number, f"{task}{try_number}"), role, "rb0", None)
    return CommitInfo(commit_id, parents, encode_metadata(record), 1)


def test_a_run_branch_publication_lists_the_runs_tasks_down_to_its_input() -> None:
    log = [
        _run_commit("mb", "b", 1, ROLE_PUBLISH, ("ma", "sb")),
        _run_commit("sb", "b", 1, ROLE_STAGE, ("ma",)),
        CommitInfo("pc", ("ma",), provider_metadata("d", "r1", "c", 2, 1), 1),
        _run_commit("ma", "a", 2, ROLE_PUBLISH, ("rb0", "sa")),
        _run_commit("sa", "a", 2, ROLE_STAGE, ("rb0",)),
        CommitInfo("foreign", ("rb0",), {}, 1),
        CommitInfo(INPUT, (), {}, 1),
        _run_commit("older", "z", 1, ROLE_PUBLISH, ()),
    ]
    tasks, cut = run_tasks_of(log, INPUT)
    assert [(t.task_id, t.map_index, t.try_number, t.output_ref, t.staged_commit, t.commits) for t in tasks] == [
        ("b", -1, 1, "mb", "sb", ("mb", "sb")),
        ("c", 2, 1, "pc", None, ("pc",)),
        ("a", -1, 2, "ma", "sa", ("ma", "sa")),
    ]
    assert not cut
    assert run_tasks_of(log[:3], INPUT) == (tasks[:2], True)  # the log stopped before the input
    assert run_tasks_of(log, INPUT, limit=1)[1] is True


def test_a_run_branch_publications_row_carries_its_run() -> None:
    state = MemoryRunState()
    record_publication(state, "p1", 1, "merge")
    merge = _publication(1, "p1", "s1")
    merge = CommitInfo("p1", merge.parents, {**merge.metadata, RUN_BRANCH_METADATA_KEY: "run-x"}, 1)
    staged = _stage(1, "s1", {RUN_BRANCH_METADATA_KEY: "run-x", RUN_HEAD_METADATA_KEY: "mb"})
    assert run_publication_of(merge) == ("run-x", None) and run_publication_of(staged) == ("run-x", "mb")
    log = [_run_commit("mb", "b", 1, ROLE_PUBLISH, (INPUT, "sb")), CommitInfo(INPUT, (), {}, 1)]
    (row,) = history_rows(_facts(1, "success", "p1"), state.values, {"p1": merge, "s1": staged}, [], None, {"p1": log})
    assert (row.run_branch, row.run_head, [t.task_id for t in row.run_tasks]) == ("run-x", "mb", ["b"])
    assert row.to_dict()["run_tasks"][0]["output_ref"] == "mb"
