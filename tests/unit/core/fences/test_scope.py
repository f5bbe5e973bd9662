"""The scoped fence's pure core: declared prefixes, the probe scan, the decisions and their messages."""

from __future__ import annotations

import pytest

from airflow_lakefence.core.fences import hard as hf
from airflow_lakefence.core.fences.scope import (
    SCOPED_REVERTS_KEY,
    DiffQuery,
    Scope,
    ScopedAction,
    ScopeScan,
    Touch,
    decide_own_history,
    describe_conflict,
    parse_scope,
    scoped_revert_metadata,
    verify_after_merge,
)
from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.ports import CommitInfo
from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, ROLE_STAGE, LakefenceRecord, encode_metadata
from airflow_lakefence.exceptions import InvalidInputError

pytestmark = pytest.mark.scoped

I = "1" * 64  # noqa: E741 - the protocol's name for the input commit
H = "2" * 64
KEY = PublicationKey("daily", "scheduled__2026-01-01", "counts")
TRY2 = AttemptId(KEY, 2, "ti-2")


def stage_commit(cid: str, attempt: AttemptId, *, input_ref: str = I, revert: str | None = None) -> CommitInfo:
    metadata = encode_metadata(LakefenceRecord(attempt, ROLE_STAGE, input_ref))
    if revert is not None:
        metadata = scoped_revert_metadata(metadata, revert)
    return CommitInfo(cid, (input_ref,), metadata, message="stage")


# -- declared prefixes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "inputs", "write", "read", "fenced"),
    [
        (["tables/t/date=1"], None, ("tables/t/date=1/",), (), ("tables/t/date=1/",)),
        ([" tables/t/date=1/ ", "tables/u/"], [], ("tables/t/date=1/", "tables/u/"), (), None),
        (["t/a=1,b=2/"], ["dims/d/"], ("t/a=1,b=2/",), ("dims/d/",), ("dims/d/", "t/a=1,b=2/")),
        # A read prefix inside a write prefix adds nothing; one containing it replaces it.
        (["t/x/"], ["t/x/y/"], ("t/x/",), ("t/x/y/",), ("t/x/",)),
        (["t/x/date=1/"], ["t/x/"], ("t/x/date=1/",), ("t/x/",), ("t/x/",)),
        (["t/x/"], ["t/x/"], ("t/x/",), ("t/x/",), ("t/x/",)),
        (["t/xy/"], ["t/x/"], ("t/xy/",), ("t/x/",), ("t/x/", "t/xy/")),
    ],
)
def test_parse_scope_normalises(
    output: list[str], inputs: list[str] | None, write: tuple[str, ...], read: tuple[str, ...], fenced: tuple | None
) -> None:
    scope = parse_scope(output, inputs, "prefixes")
    assert scope is not None
    assert (scope.output_prefixes, scope.input_prefixes) == (write, read)
    assert scope.fenced == (fenced if fenced is not None else tuple(sorted(write + read)))


@pytest.mark.parametrize(
    ("output", "inputs", "mode", "needle"),
    [
        (None, None, "prefixes", "needs output_prefixes"),
        ([], ["a/"], "prefixes", "needs output_prefixes"),
        (["a/"], None, "bogus", "must be 'branch' or 'prefixes'"),
        (["a/"], ["b/"], "branch", "read set of the scoped fence"),
        ("tables/t/", None, "prefixes", "not a string"),
        (["a/"], "b/", "prefixes", "not a string"),
        (["t/a/", "t/a/b/"], None, "prefixes", "overlap"),
        (["t/a", "t/a/"], None, "prefixes", "twice"),
        (["a/"], ["d/x/", "d/"], "prefixes", "overlap"),
        (["a/"], ["/abs/path/"], "prefixes", "absolute"),
        (["/a/"], None, "prefixes", "absolute"),
        (["a/"], ["../up/"], "prefixes", "'..'"),
        (["a/"], ["x/./y/"], "prefixes", "'.'"),
        (["a/"], ["x//y/"], "prefixes", "empty"),
        (["a/"], ["s3://bucket/x/"], "prefixes", "URI"),
        (["a/"], ["lakefs://repo/main/x/"], "prefixes", "URI"),
        (["a/"], ["c:/x/"], "prefixes", "URI"),
        (["a/"], [""], "prefixes", "empty"),
        (["a/"], ["  /  "], "prefixes", "empty"),
        (["a/"], [3], "prefixes", "must be a string"),
        (["a/"], ["x\ny/"], "prefixes", "control character"),
        (["a/"], ["x\\y/"], "prefixes", "backslash"),
        (["_lakefs_actions/"], None, "prefixes", "lakeFS actions"),
        (["_lakefs_actions/sub/"], None, "prefixes", "lakeFS actions"),
        ([f"t/{i}/" for i in range(hf.MAX_SCOPE_PREFIXES + 1)], None, "prefixes", "more than"),
    ],
)
def test_parse_scope_refuses_bad_input_clearly(output: object, inputs: object, mode: str, needle: str) -> None:
    with pytest.raises(InvalidInputError, match=None) as info:
        parse_scope(output, inputs, mode)  # type: ignore[arg-type]
    assert needle in str(info.value)


def test_branch_mode_is_the_default_and_has_no_scope() -> None:
    assert parse_scope(["tables/t/"], None) is None
    assert parse_scope(None, None, "branch") is None


def test_merge_metadata_round_trips_through_the_hard_fence_keys() -> None:
    scope = parse_scope(["t/k=a b,c%/"], ["d/x=1/"], "prefixes")
    assert scope is not None
    metadata = scope.merge_metadata(I)
    assert metadata[hf.EXPECTED_HEAD_KEY] == I
    assert hf.scope_of(metadata) == ("d/x=1/", "t/k=a b,c%/")
    assert hf.scope_of({}) is None
    with pytest.raises(ValueError):
        hf.scope_of({hf.SCOPE_COUNT_KEY: "2", f"{hf.SCOPE_KEY_PREFIX}1": "a/"})
    with pytest.raises(ValueError):
        hf.scope_of({hf.SCOPE_COUNT_KEY: "x"})


# -- the scan and its decision ----------------------------------------------------------------------


def run_scan(scope: Scope, answers: dict[DiffQuery, str | None], head: str = H) -> tuple[ScopeScan, list[DiffQuery]]:
    scan = ScopeScan(scope, head, I)
    asked = []
    while (query := scan.next_query()) is not None:
        asked.append(query)
        scan.record(query, answers.get(query), "added")
    return scan, asked


def test_head_is_the_input_asks_nothing() -> None:
    scope = Scope(("t/a/",), ("d/",))
    scan, asked = run_scan(scope, {}, head=I)
    assert asked == [] and scan.calls == 0
    assert scan.decide(changed=True).action is ScopedAction.MERGE
    noop = scan.decide(changed=False)
    assert (noop.action, noop.output_ref) == (ScopedAction.NOOP, I)


@pytest.mark.parametrize("prefixes", [1, 2, 5, 64])
def test_an_untouched_scope_costs_one_question_per_fenced_prefix(prefixes: int) -> None:
    scope = Scope(tuple(f"t/{i:02d}/" for i in range(prefixes)))
    scan, asked = run_scan(scope, {})
    assert asked == [DiffQuery(p) for p in scope.fenced] and scan.calls == prefixes
    assert scan.decide(changed=True).action is ScopedAction.MERGE
    assert scan.decide(changed=False).action is ScopedAction.NOOP


def test_a_change_in_the_read_set_fails_closed() -> None:
    scope = Scope(("t/a/",), ("d/",))
    scan, _ = run_scan(scope, {DiffQuery("d/"): "d/part-9"})
    decision = scan.decide(changed=True)
    assert decision.action is ScopedAction.FAIL_CLOSED
    assert decision.touches == (Touch("d/", "d/part-9", None, "added"),)
    assert "d/part-9" in decision.reason and "read prefix" in decision.reason


def test_a_change_in_the_write_set_only_inspects_the_history() -> None:
    scope = Scope(("t/a/", "t/b/"))
    scan, _ = run_scan(scope, {DiffQuery("t/b/"): "t/b/part-0"})
    decision = scan.decide(changed=True)
    assert decision.action is ScopedAction.INSPECT
    assert [t.write_prefix for t in decision.touches] == ["t/b/"]


def test_a_read_prefix_containing_a_write_prefix_looks_past_it() -> None:
    # The job reads the whole table and writes one partition: its own earlier output under the
    # partition must not hide another writer's change elsewhere in the table.
    scope = Scope(("t/date=2/",), ("t/",))
    past = DiffQuery("t/", after="t/date=2/\U0010ffff")
    scan, asked = run_scan(scope, {DiffQuery("t/"): "t/date=2/part-0", past: "t/date=3/part-0"})
    assert asked == [DiffQuery("t/"), past]
    assert scan.decide(changed=True).action is ScopedAction.FAIL_CLOSED
    scan, asked = run_scan(scope, {DiffQuery("t/"): "t/date=2/part-0"})
    assert len(asked) == 2 and scan.decide(changed=True).action is ScopedAction.INSPECT


def test_the_scan_refuses_answers_it_did_not_ask_for() -> None:
    scan = ScopeScan(Scope(("t/a/",)), H, I)
    with pytest.raises(ValueError):
        scan.record(DiffQuery("t/b/"), None)
    with pytest.raises(ValueError):
        scan.record(DiffQuery("t/a/"), "elsewhere/x")
    with pytest.raises(ValueError):
        scan.decide(changed=True)


# -- the write set's history ----------------------------------------------------------------------


SCOPE = Scope(("t/date=1/",))


@pytest.mark.parametrize(
    ("commits", "changed", "action", "unwind"),
    [
        # try 1 published and died: replace it (or relocate when this try wrote nothing).
        ([stage_commit("c1", AttemptId(KEY, 1, "ti-1"))], True, ScopedAction.REPLACE, "c1"),
        ([stage_commit("c1", AttemptId(KEY, 1, "ti-1"))], False, ScopedAction.RELOCATE, "c1"),
        # this very attempt published and lost the answer.
        ([stage_commit("c2", TRY2)], True, ScopedAction.IDEMPOTENT, None),
        # an earlier try replaced try 0's output (revert + stage): the newest stage is the one to undo.
        (
            [
                stage_commit("r1", AttemptId(KEY, 1, "ti-1"), revert="c0"),
                stage_commit("c1", AttemptId(KEY, 1, "ti-1")),
                stage_commit("c0", AttemptId(KEY, 1, "ti-0")),
            ],
            True,
            ScopedAction.REPLACE,
            "c1",
        ),
        # an earlier try relocated (revert only): the write set already holds the input's content.
        ([stage_commit("r1", AttemptId(KEY, 1, "ti-1"), revert="c0")], True, ScopedAction.REPLACE, None),
        ([stage_commit("r1", AttemptId(KEY, 1, "ti-1"), revert="c0")], False, ScopedAction.NOOP, None),
        # older commits of other keys after this key's own ones: history before the input.
        (
            [stage_commit("c1", AttemptId(KEY, 1, "ti-1")), CommitInfo("old", (), {}, message="seed")],
            True,
            ScopedAction.REPLACE,
            "c1",
        ),
    ],
)
def test_own_history_decisions(
    commits: list[CommitInfo], changed: bool, action: ScopedAction, unwind: str | None
) -> None:
    decision = decide_own_history(SCOPE, commits, attempt=TRY2, input_ref=I, head=H, changed=changed)
    assert (decision.action, decision.unwind) == (action, unwind)
    if action in (ScopedAction.REPLACE, ScopedAction.RELOCATE):
        assert decision.content_check == ((unwind or I, "t/date=1/"),)


@pytest.mark.parametrize(
    ("commit", "needle"),
    [
        (CommitInfo("f1", (I,), {}, message="manual fix\nmore"), "not written by lakefence ('manual fix')"),
        (stage_commit("o1", AttemptId(PublicationKey("daily", "r", "other"), 1, "x")), "task 'other'"),
        (stage_commit("n1", AttemptId(KEY, 1, "ti-1"), input_ref="9" * 64), "task 'counts'"),
        (stage_commit("c3", AttemptId(KEY, 3, "ti-3")), "try 3"),
        (
            CommitInfo("p1", (I, "c1"), encode_metadata(LakefenceRecord(AttemptId(KEY, 1, "t"), ROLE_PUBLISH, I))),
            "publish commit",
        ),
    ],
)
def test_own_history_fails_closed_naming_the_commit(commit: CommitInfo, needle: str) -> None:
    decision = decide_own_history(SCOPE, [commit], attempt=TRY2, input_ref=I, head=H, changed=True)
    assert decision.action is ScopedAction.FAIL_CLOSED
    assert decision.culprit == commit
    assert commit.id in decision.reason and needle in decision.reason


def test_own_history_without_commits_fails_closed() -> None:
    decision = decide_own_history(SCOPE, [], attempt=TRY2, input_ref=I, head=H, changed=True)
    assert decision.action is ScopedAction.FAIL_CLOSED and decision.culprit is None


def test_scoped_revert_metadata_needs_a_stage_record() -> None:
    with pytest.raises(ValueError):
        scoped_revert_metadata({"x": "y"}, "c1")
    meta = scoped_revert_metadata(encode_metadata(LakefenceRecord(TRY2, ROLE_STAGE, I)), "c1")
    assert meta[SCOPED_REVERTS_KEY] == "c1"


def test_describe_conflict_names_path_commit_task_and_what_to_do() -> None:
    touch = Touch("t/date=1/", "t/date=1/part-0", "t/date=1/", "added")
    culprit = stage_commit("o1", AttemptId(PublicationKey("other_dag", "r1", "load", 3), 1, "x"))
    text = describe_conflict(touch, culprit, input_ref=I, head=H, target="main")
    for needle in ("'t/date=1/part-0'", "write prefix", "o1", "'other_dag'", "'load'", "map index 3", I, H, "kept"):
        assert needle in text
    assert "by commit" not in describe_conflict(touch, None, input_ref=I, head=H, target="main")


@pytest.mark.parametrize(
    ("first_parent", "recheck"),
    [(H, ()), (I, ()), ("3" * 64, ("d/", "t/a/"))],
)
def test_verify_after_merge(first_parent: str, recheck: tuple[str, ...]) -> None:
    scope = Scope(("t/a/",), ("d/",))
    assert verify_after_merge(scope, merge_first_parent=first_parent, probed_head=H, input_ref=I) == recheck


# -- the shipped hook's scoped rule, in a Lua interpreter restricted as lakeFS's ------------------


def run_v2(metadata: dict[str, str], first_parent: str, diffs: dict[str, tuple[int, list[str]]]) -> str | None:
    """Run the shipped hook with a fake ``lakefs`` module answering ``diffs[prefix]``; the error text or ``None``."""
    lupa = pytest.importorskip("lupa")
    from lakefence_testing.lakefs_server._actions import _GO_LUA_PRELUDE

    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    lua.execute(_GO_LUA_PRELUDE)
    calls: list[tuple[object, ...]] = []

    def diff_refs(*args: object) -> tuple[int, object]:
        calls.append(args)
        status, paths = diffs.get(str(args[4]), (200, []))
        results = lua.table_from([lua.table_from({"path": p, "type": "added"}) for p in paths])
        return status, lua.table_from({"results": results})

    lua.globals().package.loaded.lakefs = lua.table_from({"diff_refs": diff_refs})
    lua.globals().action = lua.table_from(
        {
            "repository_id": "repo",
            "branch_id": "main",
            "commit": lua.table_from(
                {"metadata": lua.table_from(metadata), "parents": lua.table_from([first_parent, "src"])}
            ),
        }
    )
    ok, err = lua.eval("function(code) local ok, err = pcall(load(code)); return ok, err end")(hf.lua_script())
    run_v2.calls = calls  # type: ignore[attr-defined]
    return None if ok else str(err)


def test_v2_asks_one_diff_per_prefix_with_lakefs_argument_order() -> None:
    metadata = hf.scoped_merge_metadata(I, ["t/a/", "d/x=1,y/"])
    assert run_v2(metadata, H, {}) is None
    assert run_v2.calls == [  # type: ignore[attr-defined]
        ("repo", I, H, "", "t/a/", "", 1),
        ("repo", I, H, "", "d/x=1,y/", "", 1),
    ]
    assert run_v2(metadata, I, {}) is None and run_v2.calls == []  # type: ignore[attr-defined]


def test_v2_refuses_a_touched_scope_with_a_parsable_encoded_message() -> None:
    prefix, path = "t/k=a b,c%/", "t/k=a b,c%/part 0'\"\n"
    error = run_v2(hf.scoped_merge_metadata(I, ["d/", prefix]), H, {prefix: (200, [path])})
    assert error is not None and " " not in error.split(" scope ", 1)[1].split(" ", 1)[0]
    rejection = hf.classify_rejection(error)
    assert (rejection.kind, rejection.version, rejection.scope_prefix, rejection.path) == (
        hf.RejectionKind.HARD_FENCE,
        hf.HARD_FENCE_VERSION,
        prefix,
        path,
    )
    assert (rejection.expected_head, rejection.found_head) == (I, H)


@pytest.mark.parametrize(
    ("metadata", "diffs", "needle"),
    [
        ({hf.EXPECTED_HEAD_KEY: I, hf.SCOPE_COUNT_KEY: "0"}, {}, "scope malformed"),
        ({hf.EXPECTED_HEAD_KEY: I, hf.SCOPE_COUNT_KEY: "65"}, {}, "scope malformed"),
        ({hf.EXPECTED_HEAD_KEY: I, hf.SCOPE_COUNT_KEY: "1.5"}, {}, "scope malformed"),
        ({hf.EXPECTED_HEAD_KEY: I, hf.SCOPE_COUNT_KEY: "x"}, {}, "scope malformed"),
        (
            {hf.EXPECTED_HEAD_KEY: I, hf.SCOPE_COUNT_KEY: "2", f"{hf.SCOPE_KEY_PREFIX}1": "a/"},
            {},
            "no lakefence.scope.2",
        ),
        (hf.scoped_merge_metadata(I, ["a/"]), {"a/": (404, [])}, "not checked"),
    ],
)
def test_v2_refuses_malformed_scopes_and_unanswered_diffs(
    metadata: dict[str, str], diffs: dict[str, tuple[int, list[str]]], needle: str
) -> None:
    error = run_v2(metadata, H, diffs)
    assert error is not None and needle in error
    assert hf.classify_rejection(error).kind is hf.RejectionKind.HARD_FENCE


def test_the_docs_show_the_shipped_hook() -> None:
    from pathlib import Path

    docs = Path(__file__).resolve().parents[4] / "docs" / "hard-fence.md"
    assert hf.lua_script() in docs.read_text()
