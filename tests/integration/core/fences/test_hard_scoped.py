"""The hard fence v2, scoped to prefixes, inside lakeFS (both backends).

A scoped merge names its expected base and its scope prefixes in its metadata
(:func:`~airflow_lakefence.core.fences.hard.scoped_merge_metadata`); the shipped Lua hook asks lakeFS,
inside the retried branch update, whether anything under a prefix changed since the base
(``require("lakefs").diff_refs``) and refuses the merge (412) when it did. The merges here are sent
through the product's adapter (so its 412 translation is exercised); the scenarios are built with
the ``lakefs`` SDK directly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import lakefs
import lakefs_sdk
import pytest
from lakefs_sdk.exceptions import ApiException

from airflow_lakefence.core.fences import hard as hf
from airflow_lakefence.core.fences.scope import (
    OWN_HISTORY_PAGE,
    Scope,
    ScopedAction,
    ScopedDecision,
    ScopeScan,
    decide_own_history,
    describe_conflict,
    scoped_revert_metadata,
)
from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.ports import CommitInfo
from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, ROLE_STAGE, LakefenceRecord, encode_metadata
from airflow_lakefence.exceptions import LakeFSHardFenceRejectedError, LakeFSUnavailableError
from airflow_lakefence.hardfence import install_hard_fence, probe_hard_fence
from airflow_lakefence.hardfence.__main__ import main as cli_main
from lakefence_testing.pytest_plugin import LakeFSServerInfo
from tests.integration.hard_fence_helpers import CountingClient, commit_on, head, stage
from tests.integration.helpers import run_together

pytestmark = [pytest.mark.hard_fence, pytest.mark.scoped]


def _objects(repo: lakefs.Repository, ref: str, prefix: str) -> dict[str, bytes]:
    return {o.path: repo.ref(ref).object(o.path).reader().read() for o in repo.ref(ref).objects(prefix=prefix)}


def _merge(adapter: CountingClient, repo: str, staged: str, base: str, prefixes: Sequence[str]) -> str:
    return adapter.merge(repo, staged, "main", "scoped publish", hf.scoped_merge_metadata(base, prefixes))


def _install_v1(repo: lakefs.Repository) -> str:
    """Seed ``main``, then install the hard fence's first version (no scoped rule); return its commit."""
    commit_on(repo, "main", {"data/seed": b"seed"}, "seed")
    return commit_on(repo, "main", {hf.ACTION_PATH: hf.render_action_bytes(1)}, "install the hard fence v1")


def test_a_scoped_merge_lands_on_a_moved_target_when_its_scope_is_untouched(
    fenced_repo: lakefs.Repository, adapter: CountingClient
) -> None:
    base = head(fenced_repo)
    staged = stage(fenced_repo, base, {"tables/t/date=1/part-0": b"one"})
    other = commit_on(fenced_repo, "main", {"tables/t/date=2/part-0": b"two", "tables/u/x": b"u"})
    merge = _merge(adapter, fenced_repo.id, staged, base, ["tables/t/date=1/", "tables/t/date=0/"])
    commit = fenced_repo.commit(merge).get_commit()
    assert list(commit.parents) == [other, staged]
    assert _objects(fenced_repo, "main", "tables/t/") == {
        "tables/t/date=1/part-0": b"one",
        "tables/t/date=2/part-0": b"two",
    }


@pytest.mark.parametrize("where", ["write", "read"])
def test_a_scoped_merge_is_refused_when_a_commit_since_the_base_touched_its_scope(
    fenced_repo: lakefs.Repository, adapter: CountingClient, where: str
) -> None:
    # Prefixes may hold any character: the metadata holds one prefix per key, the hook's message
    # percent-encodes them.
    write, read = "tables/t/k=a b,c%/", "dims/d=x,y/"
    base = head(fenced_repo)
    staged = stage(fenced_repo, base, {f"{write}part-0": b"mine"})
    touched = f"{write if where == 'write' else read}from other writer"
    foreign = commit_on(fenced_repo, "main", {touched: b"theirs"})
    with pytest.raises(LakeFSHardFenceRejectedError) as info:
        _merge(adapter, fenced_repo.id, staged, base, [write, read])
    assert info.value.status == 412
    rejection = hf.classify_rejection(str(info.value))
    assert (rejection.version, rejection.scoped) == (hf.HARD_FENCE_VERSION, True)
    assert rejection.scope_prefix == (write if where == "write" else read)
    assert (rejection.path, rejection.expected_head, rejection.found_head) == (touched, base, foreign)
    text = hf.explain_scoped_rejection(rejection, target="main")
    assert touched in text and foreign in text
    assert head(fenced_repo) == foreign
    assert _objects(fenced_repo, "main", write) == ({} if where == "read" else {touched: b"theirs"})


def test_eight_concurrent_scoped_merges_of_disjoint_prefixes_all_land(
    fenced_repo: lakefs.Repository, adapter: CountingClient
) -> None:
    base = head(fenced_repo)
    outputs = {
        f"tables/t/date=2026-01-{day:02d}/": {f"tables/t/date=2026-01-{day:02d}/part-0": f"day {day}".encode()}
        for day in range(1, 9)
    }
    staged = {prefix: stage(fenced_repo, base, files) for prefix, files in outputs.items()}

    def merge(prefix: str) -> Callable[[], str]:
        def call() -> str:
            # lakeFS gives up on a branch update after its own retries (429); the merge did not happen,
            # so sending it again is safe. Counted: the test reports it rather than hiding it.
            for _ in range(5):
                try:
                    return _merge(adapter, fenced_repo.id, staged[prefix], base, [prefix])
                except LakeFSUnavailableError as exc:
                    if exc.status != 429:
                        raise
            raise AssertionError("lakeFS answered 429 five times")

        return call

    results = run_together([merge(prefix) for prefix in outputs])
    assert all(isinstance(r, str) for r in results), results
    for prefix, files in outputs.items():
        assert _objects(fenced_repo, "main", prefix) == files
    # Eight merge commits stacked on the base, one per publication, each with its own scope.
    log = list(fenced_repo.ref("main").log(max_amount=9, first_parent=True))
    assert {c.id for c in log[:8]} == set(results)
    assert log[8].id == base
    assert sorted(hf.scope_of(c.metadata) or () for c in log[:8]) == [(p,) for p in sorted(outputs)]


def test_four_concurrent_scoped_merges_of_one_prefix_exactly_one_lands(
    fenced_repo: lakefs.Repository, adapter: CountingClient
) -> None:
    base = head(fenced_repo)
    prefix = "tables/t/date=2026-01-01/"
    staged = [stage(fenced_repo, base, {f"{prefix}part-{i}": f"writer {i}".encode()}) for i in range(4)]
    results = run_together([lambda s=s: _merge(adapter, fenced_repo.id, s, base, [prefix]) for s in staged])
    landed = [i for i, r in enumerate(results) if isinstance(r, str)]
    refused = [r for r in results if isinstance(r, LakeFSHardFenceRejectedError)]
    assert len(landed) == 1 and len(refused) == 3, results
    for rejection in map(hf.classify_rejection, map(str, refused)):
        assert (rejection.scoped, rejection.scope_prefix, rejection.expected_head) == (True, prefix, base)
    [winner] = landed
    assert head(fenced_repo) == results[winner]
    assert _objects(fenced_repo, "main", prefix) == {f"{prefix}part-{winner}": f"writer {winner}".encode()}


def test_an_unscoped_merge_under_v2_behaves_as_v1(fenced_repo: lakefs.Repository, adapter: CountingClient) -> None:
    base = head(fenced_repo)
    staged = stage(fenced_repo, base, {"tables/t/part-0": b"x"})
    moved = commit_on(fenced_repo, "main", {"elsewhere/y": b"y"})
    with pytest.raises(LakeFSHardFenceRejectedError) as info:
        adapter.merge(fenced_repo.id, staged, "main", "publish", hf.expected_head_metadata(base))
    assert (info.value.found_head, info.value.expected_head) == (moved, base)
    assert hf.classify_rejection(str(info.value)).version == hf.HARD_FENCE_VERSION
    merge = adapter.merge(fenced_repo.id, staged, "main", "publish", hf.expected_head_metadata(moved))
    assert fenced_repo.commit(merge).get_commit().parents[0] == moved
    # A merge naming no expected head passes untouched.
    plain = stage(fenced_repo, merge, {"other/z": b"z"})
    adapter.merge(fenced_repo.id, plain, "main", "not ours", {})
    assert head(fenced_repo) != merge


def test_v1_keeps_fencing_branch_wide_merges_and_refuses_scoped_ones_with_an_upgrade_message(
    lakefence_repo: lakefs.Repository, adapter: CountingClient
) -> None:
    base = _install_v1(lakefence_repo)
    check = hf.check_ref(adapter, lakefence_repo.id, base)
    assert (check.status, check.installed_version, check.enforced, check.scoped) == (
        hf.FenceStatus.OUTDATED,
        1,
        True,
        False,
    )
    assert check.refusal(scoped=False) is None
    assert hf.INSTALL_COMMAND in (check.refusal(scoped=True) or "")
    prefix = "tables/t/date=1/"
    staged = stage(lakefence_repo, base, {f"{prefix}part-0": b"mine"})
    moved = commit_on(lakefence_repo, "main", {"tables/t/date=2/part-0": b"disjoint"})
    # v1 knows no scope: a scoped merge onto a moved target fails closed even though the scope is untouched.
    with pytest.raises(LakeFSHardFenceRejectedError) as info:
        _merge(adapter, lakefence_repo.id, staged, base, [prefix])
    rejection = hf.classify_rejection(str(info.value))
    assert (rejection.version, rejection.scoped, rejection.found_head) == (1, False, moved)
    assert hf.INSTALL_COMMAND in hf.explain_scoped_rejection(rejection, target="main")
    # Branch-wide merges are still fenced by v1.
    with pytest.raises(LakeFSHardFenceRejectedError):
        adapter.merge(lakefence_repo.id, staged, "main", "publish", hf.expected_head_metadata(base))
    assert head(lakefence_repo) == moved
    # The upgrade is a merge; afterwards the same scoped publication (rebuilt on the new head) lands.
    result = install_hard_fence(adapter, lakefence_repo.id, "main")
    assert result.installed and result.before.status is hf.FenceStatus.OUTDATED
    assert hf.check_ref(adapter, lakefence_repo.id, result.head).scoped
    staged2 = stage(lakefence_repo, result.head, {f"{prefix}part-0": b"mine"})
    commit_on(lakefence_repo, "main", {"tables/t/date=3/part-0": b"disjoint"})
    _merge(adapter, lakefence_repo.id, staged2, result.head, [prefix])
    assert _objects(lakefence_repo, "main", prefix) == {f"{prefix}part-0": b"mine"}


def test_probe_proves_the_scoped_rule_runs(fenced_repo: lakefs.Repository, adapter: CountingClient) -> None:
    before = head(fenced_repo)
    probe = probe_hard_fence(adapter, fenced_repo.id, "main")
    assert (probe.enforced, probe.scoped) == (True, True), probe.message
    assert head(fenced_repo) == before
    assert not [b for b in fenced_repo.branches(prefix="lakefence-hardfence")]


def test_probe_on_v1_says_scoped_merges_are_not_fenced(
    lakefence_repo: lakefs.Repository, adapter: CountingClient
) -> None:
    _install_v1(lakefence_repo)
    probe = probe_hard_fence(adapter, lakefence_repo.id, "main")
    assert (probe.enforced, probe.scoped) == (True, False)
    assert hf.INSTALL_COMMAND in probe.message


# What the scoped hook relies on, answered alike by both backends: ``diff_refs`` with the argument
# order of lakeFS's Lua module (repo, left, right, after, prefix, delimiter, amount), three-dot, and
# a string library without Lua patterns (lakeFS runs go-lua).
_CONFORMANCE = r"""
local lakefs = require("lakefs")
local repo, base, head = action.repository_id, action.commit.metadata["base"], action.commit.parents[1]
local out = {}
local function show(label, status, body)
  local paths = {}
  for _, d in ipairs(body.results) do table.insert(paths, d.type .. ":" .. d.path) end
  local more = tostring(body.pagination.has_more)
  table.insert(out, label .. " " .. status .. " " .. more .. " " .. table.concat(paths, ","))
end
show("ONE", lakefs.diff_refs(repo, base, head, "", "t/a/", "", 1))
show("ALL", lakefs.diff_refs(repo, base, head, "", "t/", "", 10))
show("AFTER", lakefs.diff_refs(repo, base, head, "t/a/\244\143\191\191", "t/", "", 10))
show("NONE", lakefs.diff_refs(repo, base, head, "", "t/c/", "", 1))
show("BACK", lakefs.diff_refs(repo, head, base, "", "t/", "", 10))
table.insert(out, "GSUB " .. type(string.gsub) .. " MATCH " .. type(string.match))
table.insert(out, "FIND " .. tostring(string.find("a.b", ".", 1, true)) .. " FMT " .. string.format("%%%02X", 32))
error("CONF|" .. table.concat(out, "|") .. "|END", 0)
"""


def test_the_hooks_lakefs_module_and_string_library_answer_alike(
    lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client
) -> None:
    main = lakefence_repo.branch("main")
    base = commit_on(lakefence_repo, "main", {"t/a/0": b"0", "t/b/0": b"0"}, "seed")
    commit_on(lakefence_repo, "main", {"t/a/1": b"1", "t/a/2": b"2", "t/b/1": b"1", "u/x": b"x"}, "moves")
    body = "".join(f"        {line}\n" for line in _CONFORMANCE.strip().splitlines())
    action = (
        "name: conformance\non:\n  pre-merge:\n    branches: [main]\nhooks:\n  - id: conformance\n    type: lua\n"
        f"    properties:\n      script: |\n{body}"
    ).encode()
    staged = stage(lakefence_repo, base, {"_lakefs_actions/conformance.yaml": action})
    with pytest.raises(ApiException) as info:  # the hook always fails: its message carries the answers
        lakefence_client.sdk_client.refs_api.merge_into_branch(
            lakefence_repo.id, staged, "main", merge=lakefs_sdk.Merge(metadata={"base": base})
        )
    assert info.value.status == 412
    message = str(info.value.body)
    answers = message.split("CONF|", 1)[1].split("|END", 1)[0].split("|")
    assert answers == [
        "ONE 200 true added:t/a/1",
        "ALL 200 false added:t/a/1,added:t/a/2,added:t/b/1",
        "AFTER 200 false added:t/b/1",
        "NONE 200 false ",
        "BACK 200 false ",
        "GSUB nil MATCH nil",
        "FIND 2 FMT %20",
    ]
    assert main.get_commit().message == "moves"


def test_command_line_reports_v1_and_upgrades_it_to_the_scoped_fence(
    lakefence_server: LakeFSServerInfo,
    lakefence_repo: lakefs.Repository,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LAKECTL_SERVER_ENDPOINT_URL", lakefence_server.url)
    monkeypatch.setenv("LAKECTL_CREDENTIALS_ACCESS_KEY_ID", lakefence_server.access_key_id)
    monkeypatch.setenv("LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY", lakefence_server.secret_access_key)

    def cli(*args: str) -> tuple[int, dict[str, Any]]:
        code = cli_main([*args, "--repository", lakefence_repo.id, "--branch", "main", "--from-env", "--json"])
        return code, json.loads(capsys.readouterr().out)

    _install_v1(lakefence_repo)
    code, out = cli("check")
    assert (code, out["status"], out["installed_version"], out["branch_wide"], out["scoped"]) == (
        1,
        "outdated",
        1,
        True,
        False,
    )
    code_text = cli_main(["check", "--repository", lakefence_repo.id, "--branch", "main", "--from-env"])
    text = capsys.readouterr()
    assert code_text == 1 and hf.INSTALL_COMMAND in text.err and "branch-wide" in text.err
    code, out = cli("install")
    assert (code, out["installed"], out["status_before"]) == (0, True, "outdated")
    code, out = cli("check", "--probe")
    assert (code, out["status"], out["scoped"]) == (0, "ok", True)
    assert (out["probe_enforced"], out["probe_scoped"]) == (True, True)


# -- the pure scope core against lakeFS's own answers ------------------------------------------------

KEY = PublicationKey("daily", "scheduled__2026-01-01", "counts")


def _stage_as(repo: lakefs.Repository, base: str, attempt: AttemptId, input_ref: str, files: dict[str, bytes]) -> str:
    branch = repo.branch(f"stage-{attempt.key.task_id}-{attempt.try_number}-{attempt.ti_id}").create(base, hidden=True)
    for path, data in files.items():
        branch.object(path).upload(data)
    metadata = encode_metadata(LakefenceRecord(attempt, ROLE_STAGE, input_ref))
    return str(branch.commit("stage", metadata=metadata).get_commit().id)


def _publish(adapter: CountingClient, repo: str, staged: str, attempt: AttemptId, input_ref: str, scope: Scope) -> str:
    record = encode_metadata(LakefenceRecord(attempt, ROLE_PUBLISH, input_ref, staged))
    return adapter.merge(repo, staged, "main", "publish", {**record, **scope.merge_metadata(input_ref)})


def _scan(
    client: lakefs.Client, repo: str, scope: Scope, head_id: str, input_ref: str, changed: bool
) -> ScopedDecision:
    scan = ScopeScan(scope, head_id, input_ref)
    while (query := scan.next_query()) is not None:
        page = client.sdk_client.refs_api.diff_refs(
            repo, input_ref, head_id, prefix=query.prefix, after=query.after, amount=1, type="three_dot"
        )
        first = page.results[0] if page.results else None
        scan.record(query, None if first is None else first.path, "" if first is None else first.type)
    assert scan.calls <= len(scope.fenced) + len(scope.write)
    return scan.decide(changed=changed)


def _log(client: lakefs.Client, repo: str, ref: str, **filters: Any) -> list[CommitInfo]:
    page = client.sdk_client.refs_api.log_commits(repo, ref, limit=True, **filters)
    return [CommitInfo(c.id, tuple(c.parents), dict(c.metadata or {}), message=c.message) for c in page.results]


def test_the_scope_core_decides_on_lakefs_answers(
    fenced_repo: lakefs.Repository, adapter: CountingClient, lakefence_client: lakefs.Client
) -> None:
    repo = fenced_repo.id
    scope = Scope(("tables/t/date=1/",), ("dims/d/",))
    write = scope.write[0]
    base = commit_on(fenced_repo, "main", {"dims/d/v": b"1", f"{write}old": b"seed"}, "input")
    try1, try2, try3 = (AttemptId(KEY, n, f"ti-{n}") for n in (1, 2, 3))
    # Try 1 publishes and dies; another writer publishes a disjoint partition on top.
    c1 = _stage_as(fenced_repo, base, try1, base, {f"{write}part-0": b"try 1"})
    _publish(adapter, repo, c1, try1, base, scope)
    other = Scope(("tables/t/date=2/",))
    other_try = AttemptId(PublicationKey("daily", "scheduled__2026-01-02", "counts"), 1, "o")
    o1 = _stage_as(fenced_repo, base, other_try, base, {"tables/t/date=2/x": b"2"})
    _publish(adapter, repo, o1, other_try, base, other)
    head_id = head(fenced_repo)

    # Try 2: the scope's write set changed (try 1's output), the read set did not.
    c2 = _stage_as(fenced_repo, base, try2, base, {f"{write}part-0": b"try 2"})
    decision = _scan(lakefence_client, repo, scope, head_id, base, changed=True)
    assert decision.action is ScopedAction.INSPECT
    history = _log(lakefence_client, repo, head_id, prefixes=list(scope.write), amount=OWN_HISTORY_PAGE)
    assert [c.id for c in history[:1]] == [c1]  # merges are skipped: the staged commit names the try
    own = decide_own_history(scope, history, attempt=try2, input_ref=base, head=head_id, changed=True)
    assert (own.action, own.unwind, own.content_check) == (ScopedAction.REPLACE, c1, ((c1, write),))
    equal = lakefence_client.sdk_client.refs_api.diff_refs(repo, c1, head_id, prefix=write, amount=1, type="two_dot")
    assert not equal.results

    # The merge-only replacement the engine will make: revert try 1's staged commit, merge try 2's,
    # merge the result into the target naming the HEAD it built on as the scope's expected base.
    x = fenced_repo.branch("replace-x").create(head_id, hidden=True)
    lakefence_client.sdk_client.branches_api.revert_branch(
        repo,
        "replace-x",
        lakefs_sdk.RevertCreation(
            ref=c1,
            parent_number=1,
            commit_overrides=lakefs_sdk.CommitOverrides(
                metadata=scoped_revert_metadata(encode_metadata(LakefenceRecord(try2, ROLE_STAGE, base)), c1)
            ),
        ),
    )
    adapter.merge(repo, c2, "replace-x", "stage", {})
    record = encode_metadata(LakefenceRecord(try2, ROLE_PUBLISH, base, c2))
    adapter.merge(repo, "replace-x", "main", "replace", {**record, **scope.merge_metadata(head_id)})
    x.delete()
    assert _objects(fenced_repo, "main", "tables/t/") == {
        f"{write}old": b"seed",
        f"{write}part-0": b"try 2",
        "tables/t/date=2/x": b"2",
    }
    after = head(fenced_repo)
    history = _log(lakefence_client, repo, after, prefixes=list(scope.write), amount=OWN_HISTORY_PAGE)
    # Try 2's answer was lost: it finds its own publication below HEAD; a try 3 would replace it.
    assert decide_own_history(scope, history, attempt=try2, input_ref=base, head=after, changed=True).action is (
        ScopedAction.IDEMPOTENT
    )
    third = decide_own_history(scope, history, attempt=try3, input_ref=base, head=after, changed=True)
    assert (third.action, third.unwind) == (ScopedAction.REPLACE, c2)

    # Someone else writes into the read set: the scan fails closed and names the commit.
    foreign = commit_on(fenced_repo, "main", {"dims/d/v": b"2"}, "hand fix")
    now = head(fenced_repo)
    decision = _scan(lakefence_client, repo, scope, now, base, changed=True)
    assert decision.action is ScopedAction.FAIL_CLOSED
    [touch] = [t for t in decision.touches if t.write_prefix is None]
    [culprit] = _log(lakefence_client, repo, now, objects=[touch.path], amount=1)
    assert culprit.id == foreign
    text = describe_conflict(touch, culprit, input_ref=base, head=now, target="main")
    assert "dims/d/v" in text and foreign in text and "hand fix" in text
