"""The publish-fence decision table, every row and every way out of it."""

from __future__ import annotations

import itertools

import pytest

from airflow_lakefence.core.fences.publish import Action, HeadState, decide_publish
from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, ROLE_STAGE, LakeFenceRecord, encode_metadata

INPUT = "i" * 64  # input commit
C = "c" * 64  # staged commit
H = "h" * 64  # some other HEAD
KEY = PublicationKey("dag", "run", "task", -1)
OTHER_KEY = PublicationKey("dag", "run", "other_task", -1)
ME = AttemptId(KEY, 3, "ti-3")


def meta(attempt: AttemptId, role: str = ROLE_PUBLISH, input_ref: str = INPUT) -> dict[str, str]:
    return encode_metadata(LakeFenceRecord(attempt, role, input_ref, C if role == ROLE_PUBLISH else None))


def head(
    parents: tuple[str, ...] = (INPUT,), metadata: dict[str, str] | None = None, version: int = 1, commit_id: str = H
) -> HeadState:
    return HeadState(commit_id, parents, metadata or {}, version)


EARLIER = AttemptId(KEY, 2, "ti-2")
ROWS = [
    # (name, head, changed, expected action, expected output)
    ("head is input, changes", head(commit_id=INPUT, parents=("p",)), True, Action.MERGE, None),
    ("head is input, no changes", head(commit_id=INPUT, parents=("p",)), False, Action.NOOP, INPUT),
    ("earlier try's merge on input, changes", head((INPUT, "s"), meta(EARLIER)), True, Action.REPLACE, C),
    ("earlier try's merge on input, no changes", head((INPUT, "s"), meta(EARLIER)), False, Action.RELOCATE, INPUT),
    (
        "earlier try's replacement (staged commit) on input",
        head((INPUT,), meta(EARLIER, ROLE_STAGE)),
        True,
        Action.REPLACE,
        C,
    ),
    ("try 1 of 3, changes", head((INPUT, "s"), meta(AttemptId(KEY, 1, "ti-1"))), True, Action.REPLACE, C),
    ("own publication (retried call)", head((INPUT, C), meta(ME)), True, Action.IDEMPOTENT, H),
    ("own publication, unchanged flag", head((INPUT, C), meta(ME)), False, Action.IDEMPOTENT, H),
    ("own replacement", head((INPUT,), meta(ME, ROLE_STAGE)), True, Action.IDEMPOTENT, H),
    ("legacy v0 merge: parents reversed", head(("s", INPUT), meta(EARLIER), version=0), True, Action.REPLACE, C),
    ("legacy v0 single parent", head((INPUT,), meta(EARLIER), version=0), False, Action.RELOCATE, INPUT),
]
FAILS = [
    ("foreign commit on input", head((INPUT,), {})),
    ("foreign commit with unrelated metadata", head((INPUT,), {"owner": "someone"})),
    ("another task's publication on input", head((INPUT, "s"), meta(AttemptId(OTHER_KEY, 1, "x")))),
    ("newer try on input", head((INPUT, "s"), meta(AttemptId(KEY, 4, "ti-4")))),
    ("same try number, other ti (zombie twin)", head((INPUT, "s"), meta(AttemptId(KEY, 3, "ti-3b")))),
    ("publication recording another input", head((INPUT, "s"), meta(EARLIER, input_ref="x" * 64))),
    ("two commits past input", head(("m" * 64,), meta(EARLIER))),
    ("unrelated history", head(("z" * 64,), {})),
    ("root commit", head((), {})),
    ("v1 merge with input as second parent", head(("s", INPUT), meta(EARLIER), version=1)),
    ("malformed lakefence metadata", head((INPUT,), {**meta(EARLIER), "lakefence.try_number": "two"})),
    ("partial lakefence metadata", head((INPUT,), {"lakefence.version": "1", "lakefence.role": "publish"})),
    ("unknown lakefence format version", head((INPUT,), {**meta(EARLIER), "lakefence.version": "9"})),
]


@pytest.mark.parametrize(("name", "state", "changed", "action", "output"), ROWS, ids=[r[0] for r in ROWS])
def test_allowed_rows(name: str, state: HeadState, changed: bool, action: Action, output: str | None) -> None:
    decision = decide_publish(state, INPUT, ME, changed, C if changed else INPUT)
    assert decision.action is action, decision.reason
    assert decision.output_ref == (output if action is not Action.RELOCATE else INPUT)


@pytest.mark.parametrize("changed", [True, False])
@pytest.mark.parametrize(("name", "state"), FAILS, ids=[f[0] for f in FAILS])
def test_fail_closed_rows(name: str, state: HeadState, changed: bool) -> None:
    decision = decide_publish(state, INPUT, ME, changed, C if changed else INPUT)
    assert decision.action is Action.FAIL_CLOSED
    assert decision.output_ref is None
    assert H in decision.reason or state.commit_id in decision.reason


def test_every_action_is_reachable() -> None:
    reached = {decide_publish(s, INPUT, ME, ch, C).action for _, s, ch, _, _ in ROWS}
    reached |= {decide_publish(s, INPUT, ME, True, C).action for _, s in FAILS}
    assert reached == set(Action)


@pytest.mark.parametrize(
    ("version", "parents", "first"),
    [(1, ("a", "b"), "a"), (0, ("a", "b"), "b"), (0, ("a",), "a"), (1, (), None), (0, (), None)],
)
def test_first_parent_by_version(version: int, parents: tuple[str, ...], first: str | None) -> None:
    assert HeadState("x", parents, {}, version).first_parent == first


def test_decision_properties_over_a_grid() -> None:
    """Every combination of the inputs that matter: what each action requires, and what it reports."""
    heads = [INPUT, H]
    parent_sets = [(), (INPUT,), (H,), (INPUT, "s"), ("s", INPUT)]
    records = [None, ME, EARLIER, AttemptId(KEY, 9, "n"), AttemptId(OTHER_KEY, 1, "o")]
    for commit_id, parents, record, version, changed in itertools.product(
        heads, parent_sets, records, (0, 1), (True, False)
    ):
        state = HeadState(commit_id, parents, meta(record) if record else {}, version)
        decision = decide_publish(state, INPUT, ME, changed, C if changed else INPUT)
        on_input = state.first_parent == INPUT and record is not None and record.key == KEY
        expected = {
            Action.MERGE: (commit_id == INPUT and changed, None),
            Action.NOOP: (commit_id == INPUT and not changed, INPUT),
            Action.IDEMPOTENT: (commit_id != INPUT and on_input and record == ME, commit_id),
            Action.REPLACE: (commit_id != INPUT and on_input and record == EARLIER and changed, C),
            Action.RELOCATE: (commit_id != INPUT and on_input and record == EARLIER and not changed, INPUT),
        }
        case = (commit_id[:1], parents, record, version, changed)
        allowed = [action for action, (applies, _) in expected.items() if applies]
        assert len(allowed) <= 1, case
        if allowed:
            assert decision.action is allowed[0], (case, decision.reason)
            assert decision.output_ref == expected[allowed[0]][1], case
        else:
            assert decision.action is Action.FAIL_CLOSED, (case, decision.reason)
            assert decision.output_ref is None
        assert decision.reason


@pytest.mark.parametrize(("name", "state"), FAILS, ids=[f[0] for f in FAILS])
def test_every_refusal_carries_a_code_that_the_advice_words(name: str, state: HeadState) -> None:
    """One decision: the fence's code picks the message; the advice decides nothing of its own."""
    from airflow_lakefence.core.advice import _MESSAGES, WHAT_TO_DO, fail_closed_message
    from airflow_lakefence.core.fences.publish import Reason

    decision = decide_publish(state, INPUT, ME, True, C)
    assert decision.code in _MESSAGES, decision
    message = fail_closed_message(decision.code, state, INPUT, ME, "main", before_job=False, kept_in="s")
    assert WHAT_TO_DO in message and state.commit_id in message
    allowed = {decide_publish(s, INPUT, ME, ch, C).code for _, s, ch, _, _ in ROWS}
    assert allowed.isdisjoint(_MESSAGES) and allowed <= set(Reason)
