"""The abandoned-publication decision (core/publication/abandonment.py), exhaustively over its inputs."""

from __future__ import annotations

import itertools

import pytest

from airflow_lakefence.airflow_adapter.task_instances import normalise_state, state_from_task_states
from airflow_lakefence.core.fences.publish import HeadState
from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.names.staging_names import staging_branch_name
from airflow_lakefence.core.publication.abandonment import (
    DETECT,
    FAILED_STATES,
    LIVE_STATES,
    PENDING_STATES,
    Judgement,
    PublisherScope,
    PublisherState,
    Verdict,
    condition_met,
    judge,
    needs_output_ref,
    needs_staging_listing,
    newest_try,
    nothing_written,
    output_stands_behind,
    publication_of,
)
from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, ROLE_STAGE, LakeFenceRecord, encode_metadata

KEY = PublicationKey("dag", "run1", "publish")
MAPPED = PublicationKey("dag", "run1", "publish", 3)
INPUT = "i" * 64
HEAD = "h" * 64
ALL_STATES = sorted(LIVE_STATES | PENDING_STATES | FAILED_STATES | {"success"})


def head_of(
    key: PublicationKey = KEY, try_number: int = 1, role: str = ROLE_PUBLISH
) -> tuple[HeadState, LakeFenceRecord]:
    record = LakeFenceRecord(AttemptId(key, try_number, f"ti-{try_number}"), role, INPUT)
    return HeadState(HEAD, (INPUT, "s" * 64), encode_metadata(record)), record


def test_a_commit_without_record_is_not_a_publication() -> None:
    result = publication_of(HeadState(HEAD, (INPUT,), {"user": "x"}))
    assert isinstance(result, Judgement) and result.verdict is Verdict.NOT_A_PUBLICATION and result.readable


@pytest.mark.parametrize(
    ("scope", "in_scope"),
    [
        (None, True),
        (PublisherScope(), True),
        (PublisherScope("dag"), True),
        (PublisherScope("dag", "publish"), True),
        (PublisherScope("dag", "other"), False),
        (PublisherScope("other"), False),
        (PublisherScope("other", "publish"), False),
    ],
)
def test_scope(scope: PublisherScope | None, in_scope: bool) -> None:
    head, record = head_of()
    result = publication_of(head, scope)
    if in_scope:
        assert result == record
    else:
        assert isinstance(result, Judgement) and result.verdict is Verdict.OUT_OF_SCOPE and result.readable


def test_scope_task_needs_dag() -> None:
    with pytest.raises(ValueError, match="needs its dag_id"):
        PublisherScope(None, "publish")


A, R, S, SUP = Verdict.ABANDONED, Verdict.IN_FLIGHT, Verdict.SETTLED, Verdict.SUPERSEDED
OTHER = "o" * 64
#: The table of docs/abandoned-publications.md, written out by hand: (case, state, output_ref,
#: newest staging try, supersedes, verdict, retry_pending, replacement_running). HEAD is try 1's.
JUDGE_TABLE = [
    ("run deleted", None, None, None, None, A, False, False),
    ("success with this output", "success", HEAD, None, None, S, False, False),
    ("success behind another output", "success", OTHER, None, None, A, False, False),
    ("success, output unknown", "success", None, None, None, A, False, False),
    ("running, no newer branch", "running", None, None, None, R, False, False),
    ("running, own branch only", "running", None, 1, None, R, False, False),
    ("running, newer try", "running", None, 2, None, A, False, True),
    ("deferred, newer try", "deferred", None, 2, None, A, False, True),
    ("up_for_reschedule, no newer", "up_for_reschedule", None, None, None, R, False, False),
    ("running newer try replacing a cleared success", "running", None, 2, {"output_ref": HEAD}, SUP, False, False),
    ("running newer try, supersedes another commit", "running", None, 2, {"output_ref": OTHER}, A, False, True),
    ("up_for_retry", "up_for_retry", None, None, None, A, True, False),
    ("queued", "queued", None, None, None, A, True, False),
    ("scheduled", "scheduled", None, None, None, A, True, False),
    ("cleared (none)", "none", None, None, None, A, True, False),
    ("restarting", "restarting", None, None, None, A, True, False),
    ("cleared success", "none", HEAD, None, None, SUP, False, False),
    ("cleared success queued again", "queued", HEAD, None, None, SUP, False, False),
    ("cleared, another output", "none", OTHER, None, None, A, True, False),
    ("failed", "failed", None, None, None, A, False, False),
    ("upstream_failed", "upstream_failed", None, None, None, A, False, False),
    ("skipped", "skipped", None, None, None, A, False, False),
    ("removed", "removed", None, None, None, A, False, False),
    ("a state from a newer Airflow", "some_future_state", None, 2, None, R, False, False),
]


@pytest.mark.parametrize("role", [ROLE_PUBLISH, ROLE_STAGE])
@pytest.mark.parametrize(
    ("case", "state", "output_ref", "newest", "supersedes", "verdict", "retry_pending", "replacement_running"),
    JUDGE_TABLE,
    ids=[row[0] for row in JUDGE_TABLE],
)
def test_judge_table(
    role: str,
    case: str,
    state: str | None,
    output_ref: str | None,
    newest: int | None,
    supersedes: dict[str, str] | None,
    verdict: Verdict,
    retry_pending: bool,
    replacement_running: bool,
) -> None:
    head, record = head_of(role=role)
    result = judge(head, record, PublisherState(state, output_ref, newest, supersedes))
    assert (result.verdict, result.retry_pending, result.replacement_running) == (
        verdict,
        retry_pending,
        replacement_running,
    ), result.reason
    assert result.head == HEAD and result.record == record and result.state == state
    assert result.readable is (verdict is Verdict.SETTLED)
    assert "try 1" in result.reason


def test_every_known_state_is_in_the_table() -> None:
    assert {row[1] for row in JUDGE_TABLE} >= {*ALL_STATES, None}


def test_a_staging_branch_of_the_same_try_is_no_proof_of_a_newer_try() -> None:
    head, record = head_of(try_number=2)
    for newest in (None, 1, 2):
        assert judge(head, record, PublisherState("running", None, newest)).verdict is Verdict.IN_FLIGHT
    assert judge(head, record, PublisherState("running", None, 3)).verdict is Verdict.ABANDONED


@pytest.mark.parametrize(
    ("verdict", "flags", "detect", "detect_ignoring", "settled"),
    [
        (Verdict.ABANDONED, {}, True, True, False),
        (Verdict.ABANDONED, {"retry_pending": True}, True, False, False),
        (Verdict.ABANDONED, {"replacement_running": True}, True, False, False),
        (Verdict.IN_FLIGHT, {}, False, False, False),
        (Verdict.SETTLED, {}, False, False, True),
        (Verdict.NOT_A_PUBLICATION, {}, False, False, True),
        (Verdict.OUT_OF_SCOPE, {}, False, False, True),
    ],
)
def test_conditions(
    verdict: Verdict, flags: dict[str, bool], detect: bool, detect_ignoring: bool, settled: bool
) -> None:
    judgement = Judgement(verdict, "r", HEAD, **flags)
    assert condition_met("detect", judgement) is detect
    assert condition_met("detect", judgement, ignore_repairs_underway=True) is detect_ignoring
    assert condition_met("settled", judgement) is settled
    with pytest.raises(ValueError, match="condition"):
        condition_met("wait", judgement)


@pytest.mark.parametrize("state", [*ALL_STATES, None])
def test_what_to_read(state: str | None) -> None:
    assert needs_output_ref(state) == (state == "success" or state in PENDING_STATES)
    assert needs_staging_listing(state) == (state in LIVE_STATES)


class _Enum:
    value = "RUNNING"


@pytest.mark.parametrize(("raw", "expected"), [(None, "none"), ("success", "success"), (_Enum(), "running")])
def test_normalise_state(raw: object, expected: str) -> None:
    assert normalise_state(raw) == expected


@pytest.mark.parametrize(
    ("answer", "key", "expected"),
    [
        ({"run1": {"publish": "failed"}}, KEY, "failed"),
        ({"run1": {"publish": None}}, KEY, "none"),
        ({"run1": {"publish_3": "running", "publish": "x"}}, MAPPED, "running"),
        ({"run1": {"publish_2": "running"}}, MAPPED, None),
        ({"run2": {"publish": "failed"}}, KEY, None),
        ({}, KEY, None),
        ({"run1": "garbage"}, KEY, None),
        (None, KEY, None),
    ],
)
def test_state_from_task_states(answer: object, key: PublicationKey, expected: str | None) -> None:
    assert state_from_task_states(answer, key) == expected


def test_newest_try_counts_only_the_keys_own_branches() -> None:
    names = [staging_branch_name(AttemptId(KEY, n, f"ti{n}")) for n in (1, 3, 2)]
    other = staging_branch_name(AttemptId(PublicationKey("dag", "run2", "publish"), 9, "x"))
    assert newest_try([*names, other, "main", "lakefence-garbage"], KEY, "lakefence") == 3
    assert newest_try([other], KEY, "lakefence") is None


def test_to_dict_is_json_ready() -> None:
    import json

    head, record = head_of(MAPPED, 2, ROLE_STAGE)
    data = judge(head, record, PublisherState("failed")).to_dict()
    assert json.loads(json.dumps(data)) == data
    assert (data["verdict"], data["try_number"], data["map_index"], data["role"]) == ("abandoned", 2, 3, "stage")
    assert set(data) >= {"dag_id", "run_id", "task_id", "ti_id", "input_ref", "head", "state", "reason"}


def test_every_state_class_is_disjoint() -> None:
    for a, b in itertools.combinations([LIVE_STATES, PENDING_STATES, FAILED_STATES, {"success"}], 2):
        assert not set(a) & set(b)


@pytest.mark.output_correctness
@pytest.mark.parametrize(
    ("state", "output_ref", "newest", "supersedes", "expected"),
    [
        # a cleared success, before its new try starts: its output_ref is still HEAD
        ("none", HEAD, None, None, Verdict.SUPERSEDED),
        ("queued", HEAD, None, None, Verdict.SUPERSEDED),
        # a retry after a crash: the failed try never reported HEAD
        ("up_for_retry", None, None, None, Verdict.ABANDONED),
        # the new try runs and names the publication it replaces
        ("running", None, 2, {"output_ref": HEAD, "try_number": 1}, Verdict.SUPERSEDED),
        # a new try that replaces an abandoned publication names none (or another one)
        ("running", None, 2, None, Verdict.ABANDONED),
        ("running", None, 2, {"output_ref": "other", "try_number": 1}, Verdict.ABANDONED),
    ],
)
def test_superseded_is_not_abandoned(
    state: str, output_ref: str | None, newest: int | None, supersedes: dict[str, object] | None, expected: Verdict
) -> None:
    head, record = head_of()
    result = judge(head, record, PublisherState(state, output_ref, newest, supersedes))
    assert result.verdict is expected, result.reason
    assert condition_met(DETECT, result) == (expected is Verdict.ABANDONED)
    assert not result.readable


WRITE = ("tables/t/date=1/",)


def staged_of(try_number: int = 1) -> tuple[HeadState, LakeFenceRecord]:
    """A scoped publication as the write set's log shows it: its staged commit."""
    record = LakeFenceRecord(AttemptId(KEY, try_number, f"ti-{try_number}"), ROLE_STAGE, INPUT)
    return HeadState("s" * 64, (INPUT,), encode_metadata(record)), record


def publish_metadata(try_number: int) -> dict[str, str]:
    record = LakeFenceRecord(AttemptId(KEY, try_number, f"ti-{try_number}"), ROLE_PUBLISH, INPUT, "s" * 64)
    return encode_metadata(record)


def test_scoped_output_stands_behind_the_staged_commit_of_the_same_attempt() -> None:
    _, record = staged_of(2)
    assert output_stands_behind(record, publish_metadata(2))
    assert not output_stands_behind(record, publish_metadata(1))
    assert not output_stands_behind(record, {"user": "x"}) and not output_stands_behind(record, None)


@pytest.mark.parametrize(
    ("state", "matches", "verdict"),
    [
        ("success", True, Verdict.SETTLED),
        ("success", False, Verdict.ABANDONED),
        ("failed", None, Verdict.ABANDONED),
        ("up_for_retry", None, Verdict.ABANDONED),
        ("none", True, Verdict.SUPERSEDED),
        ("running", None, Verdict.IN_FLIGHT),
    ],
)
def test_scoped_judgement_follows_the_output_match_not_head(state: str, matches: bool | None, verdict: Verdict) -> None:
    head, record = staged_of(1)
    output = "p" * 64 if matches is not None else None
    result = judge(head, record, PublisherState(state, output, output_matches=matches), WRITE)
    assert result.verdict is verdict
    assert result.head == head.commit_id and result.output_prefixes == WRITE
    assert result.publication == (output if matches else None)
    assert "the latest commit under tables/t/date=1/" in result.reason
    assert result.to_dict()["output_prefixes"] == list(WRITE)


def test_scoped_nothing_written_is_readable() -> None:
    result = nothing_written(WRITE)
    assert result.verdict is Verdict.NOT_A_PUBLICATION and result.readable and result.head is None
    assert result.to_dict()["output_prefixes"] == list(WRITE) and "dag_id" not in result.to_dict()
