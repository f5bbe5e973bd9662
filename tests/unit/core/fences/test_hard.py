"""The hard fence's pure parts: the rendered action file, the installed-copy check, the 412 classifier.

The Lua script itself runs here in a real Lua interpreter (``lupa``) with the ``action`` table lakeFS
builds for a pre-merge hook (``pkg/actions/lua.go`` ``applyRecord``), so its rule is tested
without a server; the tests in ``tests/integration/core/fences/test_hard.py`` run it inside lakeFS.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from airflow_lakefence.core.fences import hard as hf

pytestmark = pytest.mark.hard_fence

HEAD = "a" * 64
OTHER = "b" * 64
SOURCE = "c" * 64

# A 412 message as real lakeFS v1.86.0 answered it for the shipped hook (run ids kept).
REAL_REJECTION = (
    "update branch main: pre-merge hook aborted, run id '4oo0aj1ksdueac6v1j0g': 1 error occurred:\n\t* hook run id "
    "'0000_0000' failed on action 'lakefence_hard_fence' hook 'lakefence_expected_head': action failed: runtime "
    f"error: LAKEFENCE_HARD_FENCE_REJECTED v1: branch main moved to {OTHER}, expected head {HEAD}\nstack "
    'traceback:\n\t[Go]: in ?\n\t[string "lua"]:10: in main chunk\n\n'
)
USER_REJECTION = (
    "update branch main: pre-merge hook aborted, run id '4oo0b9zz': 1 error occurred:\n\t* hook run id '0000_0000' "
    "failed on action 'policy' hook 'user_policy': action failed: runtime error: USER_POLICY: no\n"
)


def run_hook(metadata: dict[str, str], parents: list[str], branch: str = "main") -> str | None:
    """Run the shipped Lua script in a real Lua interpreter; return the error text, ``None`` if it passed."""
    lupa = pytest.importorskip("lupa")
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    table: Any = lua.table_from(
        {
            "event_type": "pre-merge",
            "branch_id": branch,
            "commit": lua.table_from({"metadata": lua.table_from(metadata), "parents": lua.table_from(parents)}),
        }
    )
    lua.globals().action = table
    run = lua.eval("function(code) local ok, err = pcall(load(code)); return ok, err end")
    ok, err = run(hf.lua_script())
    return None if ok else str(err)


def test_hook_passes_a_merge_whose_first_parent_is_the_expected_head() -> None:
    assert run_hook(hf.expected_head_metadata(HEAD), [HEAD, SOURCE]) is None


def test_hook_rejects_a_merge_computed_on_another_head_with_a_parsable_message() -> None:
    error = run_hook({**hf.expected_head_metadata(HEAD), "lakefence.role": "publish"}, [OTHER, SOURCE])
    assert (
        error == f"{hf.REJECTION_MARKER} v{hf.HARD_FENCE_VERSION}: branch main moved to {OTHER}, expected head {HEAD}"
    )
    rejection = hf.classify_rejection(error)
    assert (rejection.kind, rejection.found_head, rejection.expected_head) == (hf.RejectionKind.HARD_FENCE, OTHER, HEAD)


@pytest.mark.parametrize("metadata", [{}, {"owner": "someone"}, {hf.EXPECTED_HEAD_KEY: ""}, {"lakefence.role": "x"}])
def test_hook_leaves_merges_without_an_expected_head_alone(metadata: dict[str, str]) -> None:
    assert run_hook(metadata, [OTHER, SOURCE]) is None


def test_hook_compares_only_the_first_parent() -> None:
    # The merged source being the expected head is not enough: the destination must be.
    assert run_hook(hf.expected_head_metadata(HEAD), [OTHER, HEAD]) is not None


def test_rendered_action_is_a_lakefs_pre_merge_lua_action() -> None:
    # YAML 1.2 (lakeFS's parser) reads `on` as a string; PyYAML (YAML 1.1) as True.
    doc = yaml.safe_load(hf.render_action())
    assert doc["name"] == hf.ACTION_NAME
    assert doc.get("on", doc.get(True)) == {"pre-merge": None}
    [hook] = doc["hooks"]
    assert (hook["id"], hook["type"]) == (hf.HOOK_ID, "lua")
    assert hook["properties"]["script"] == hf.lua_script()
    assert hf.ACTION_PATH.startswith("_lakefs_actions/") and hf.ACTION_PATH.count("/") == 1
    assert hf.installed_version(hf.render_action_bytes()) == hf.HARD_FENCE_VERSION


def test_check_action_states() -> None:
    current = hf.render_action()
    assert hf.check_action(current).status is hf.FenceStatus.OK
    assert hf.check_action(current.encode()).enforced
    assert hf.check_action(None).status is hf.FenceStatus.MISSING
    old = current.replace(f"version: {hf.HARD_FENCE_VERSION}", "version: 0", 1)
    assert (hf.check_action(old).status, hf.check_action(old).installed_version) == (hf.FenceStatus.OUTDATED, 0)
    newer = current.replace(f"version: {hf.HARD_FENCE_VERSION}", f"version: {hf.HARD_FENCE_VERSION + 1}", 1)
    assert hf.check_action(newer).status is hf.FenceStatus.NEWER and hf.check_action(newer).enforced
    edited = current.replace("error(", "print(")
    assert hf.check_action(edited).status is hf.FenceStatus.MODIFIED
    assert hf.check_action("name: mine\n").status is hf.FenceStatus.FOREIGN
    for status in ("missing", "outdated", "modified", "foreign"):
        assert not hf.FenceCheck(hf.FenceStatus(status), None, "").enforced
    assert "install" in hf.check_action(None, where="branch 'main'").message


def test_classify_real_lakefs_messages() -> None:
    ours = hf.classify_rejection(REAL_REJECTION)
    assert ours == hf.MergeRejection(hf.RejectionKind.HARD_FENCE, "4oo0aj1ksdueac6v1j0g", OTHER, HEAD, version=1)
    theirs = hf.classify_rejection(USER_REJECTION)
    assert (theirs.kind, theirs.run_id, theirs.found_head) == (hf.RejectionKind.USER_HOOK, "4oo0b9zz", None)
    # Both failing at once: the merge lost the race, whatever the user's hook said.
    both = hf.classify_rejection(USER_REJECTION + REAL_REJECTION)
    assert both.kind is hf.RejectionKind.HARD_FENCE


def test_expected_head_metadata_round_trip() -> None:
    assert hf.expected_head_of(hf.expected_head_metadata(HEAD)) == HEAD
    assert hf.expected_head_of({}) is None and hf.expected_head_of(None) is None
    with pytest.raises(ValueError):
        hf.expected_head_metadata("")


def test_a_lakefence_merge_vouches_for_its_fence_only_on_its_expected_head() -> None:
    publication = {**hf.expected_head_metadata(HEAD), **hf.fence_vouch_metadata(hf.HARD_FENCE_VERSION)}
    check = hf.vouched_check(publication, HEAD)
    assert check is not None and check.status is hf.FenceStatus.OK and check.enforced and check.scoped
    install = {**hf.expected_head_metadata(HEAD), hf.INSTALL_KEY: "1"}
    old = hf.vouched_check(install, HEAD)
    assert old is not None and old.status is hf.FenceStatus.OUTDATED and old.enforced and not old.scoped
    newer = hf.vouched_check({**publication, hf.FENCE_KEY: str(hf.HARD_FENCE_VERSION + 1)}, HEAD)
    assert newer is not None and newer.status is hf.FenceStatus.NEWER
    # The metadata on a commit computed on another head (a cherry-pick elsewhere) vouches for nothing,
    # nor does a commit naming no expected head, no version, or a version never shipped.
    assert hf.vouched_check(publication, OTHER) is None
    assert hf.vouched_check(publication, None) is None
    assert hf.vouched_check(hf.fence_vouch_metadata(hf.HARD_FENCE_VERSION), HEAD) is None
    assert hf.vouched_check(hf.expected_head_metadata(HEAD), HEAD) is None
    assert hf.vouched_check({**publication, hf.FENCE_KEY: "0"}, HEAD) is None
    assert hf.vouched_check({**publication, hf.FENCE_KEY: "two"}, HEAD) is None


def test_check_ref_reads_the_file_unless_the_commit_vouches() -> None:
    reads: list[str] = []

    class Port:
        def read_object(self, repository: str, ref: str, path: str) -> bytes:
            reads.append(ref)
            return hf.render_action_bytes()

    hf.forget_checks()
    vouching = {**hf.expected_head_metadata(HEAD), hf.INSTALL_KEY: str(hf.HARD_FENCE_VERSION)}
    assert hf.check_ref(Port(), "repo", "a" * 64, metadata=vouching, first_parent=HEAD).enforced
    assert reads == []
    assert hf.check_ref(Port(), "repo", "b" * 64, metadata=vouching, first_parent=OTHER).enforced
    assert reads == ["b" * 64]
    hf.forget_checks()
