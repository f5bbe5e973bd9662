"""The hard fence inside lakeFS: installed by merge, it turns a lakefence merge into a compare-and-swap.

Every test runs the shipped hook inside a lakeFS that runs actions (real lakeFS v1.86, and the local
server, which runs pre-merge Lua hooks with a real Lua interpreter) and asserts outcomes: branch
heads, commit parents, objects, the 412's class. Scenarios are built with the SDK; the product's
adapter does the fenced merges.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.fences import hard as hf
from airflow_lakefence.exceptions import (
    LakeFSHardFenceRejectedError,
    LakeFSHookRejectedError,
    LakeFSPreconditionFailedError,
)
from airflow_lakefence.hardfence import check_hard_fence, install_hard_fence, probe_hard_fence
from lakefence_testing.pytest_plugin import LakeFSServerInfo
from tests.integration.hard_fence_helpers import CountingClient, commit_on, head, install_user_hook, protect, stage

pytestmark = pytest.mark.hard_fence

CONCURRENT = 6


def fenced_merge(adapter: CountingClient, repo: lakefs.Repository, source: str, expected: str, **extra: str) -> str:
    """Merge ``source`` into main naming ``expected`` as the expected head (as a publication does)."""
    metadata = {**hf.expected_head_metadata(expected), "lakefence.role": "publish", **extra}
    return adapter.merge(repo.id, source, "main", "publish", metadata)


def rejection(exc: LakeFSPreconditionFailedError) -> hf.MergeRejection:
    """Classify a refused merge, checking that the adapter raised the matching class."""
    assert exc.status == 412 and exc.operation == "merge"
    found = hf.classify_rejection(str(exc))
    assert isinstance(exc, LakeFSHookRejectedError) and exc.run_id == found.run_id
    assert isinstance(exc, LakeFSHardFenceRejectedError) == (found.kind is hf.RejectionKind.HARD_FENCE)
    if isinstance(exc, LakeFSHardFenceRejectedError):
        assert (exc.found_head, exc.expected_head) == (found.found_head, found.expected_head)
    return found


def test_install_check_and_probe_cost_and_outcome(adapter: CountingClient, lakefence_repo: lakefs.Repository) -> None:
    repo = lakefence_repo.id
    before = head(lakefence_repo)
    assert check_hard_fence(adapter, repo, "main").status is hf.FenceStatus.MISSING
    assert adapter.calls == {"get_object": 1}
    adapter.calls.clear()

    result = install_hard_fence(adapter, repo, "main")
    assert result.installed and result.before.status is hf.FenceStatus.MISSING
    assert adapter.calls == {
        "get_object": 1,
        "create_branch": 1,
        "upload_object": 1,
        "commit": 1,
        "merge": 1,
        "delete_branch": 1,
    }
    merge = adapter.get_commit(repo, "main")
    assert merge.id == result.merge_commit == result.head
    assert merge.parents[0] == before and merge.metadata[hf.EXPECTED_HEAD_KEY] == before
    assert adapter.read_object(repo, "main", hf.ACTION_PATH) == hf.render_action_bytes()
    assert [b for b, _ in adapter.list_branches(repo, "lakefence-hardfence")] == []  # temporary branch gone

    adapter.calls.clear()
    again = install_hard_fence(adapter, repo, "main")
    assert (again.installed, again.before.status, again.head) == (False, hf.FenceStatus.OK, merge.id)
    assert adapter.calls == {"get_object": 1, "get_commit": 1}

    adapter.calls.clear()
    probe = probe_hard_fence(adapter, repo, "main")
    assert probe.enforced, probe.message
    assert hf.REJECTION_MARKER in probe.message
    assert sum(adapter.calls.values()) == 11
    assert head(lakefence_repo) == merge.id  # the probe never writes the branch
    assert [b for b, _ in adapter.list_branches(repo, "lakefence-hardfence")] == []


def test_probe_reports_a_fence_that_does_not_run(adapter: CountingClient, lakefence_repo: lakefs.Repository) -> None:
    probe = probe_hard_fence(adapter, lakefence_repo.id, "main")
    assert not probe.enforced and "does not run" in probe.message


def test_install_upgrades_an_outdated_fence_and_refuses_a_foreign_file(
    adapter: CountingClient, lakefence_repo: lakefs.Repository
) -> None:
    old = hf.render_action().replace(f"version: {hf.HARD_FENCE_VERSION}", "version: 0", 1)
    commit_on(lakefence_repo, "main", {hf.ACTION_PATH: old.encode()}, "an old fence")
    result = install_hard_fence(adapter, lakefence_repo.id, "main")
    assert result.before.status is hf.FenceStatus.OUTDATED and result.installed
    assert check_hard_fence(adapter, lakefence_repo.id, "main").status is hf.FenceStatus.OK

    commit_on(lakefence_repo, "main", {hf.ACTION_PATH: b"name: mine\non:\n  pre-merge:\nhooks: []\n"}, "a user's file")
    from airflow_lakefence.hardfence import HardFenceInstallError

    with pytest.raises(HardFenceInstallError, match="not a lakefence hard fence"):
        install_hard_fence(adapter, lakefence_repo.id, "main")
    assert install_hard_fence(adapter, lakefence_repo.id, "main", force=True).installed


def test_stale_expected_head_is_refused_and_the_target_is_unchanged(
    adapter: CountingClient, fenced_repo: lakefs.Repository
) -> None:
    expected = head(fenced_repo)
    staged = stage(fenced_repo, expected, {"data/out.txt": b"ours\n"})
    stale = fenced_repo.branch("main").get_commit().parents[0]
    with pytest.raises(LakeFSPreconditionFailedError) as caught:
        fenced_merge(adapter, fenced_repo, staged, stale)
    found = rejection(caught.value)
    assert (found.kind, found.found_head, found.expected_head) == (hf.RejectionKind.HARD_FENCE, expected, stale)
    assert found.run_id
    assert head(fenced_repo) == expected
    assert "data/out.txt" not in [o.path for o in fenced_repo.ref("main").objects()]


def test_foreign_commit_between_read_and_merge_is_refused_and_kept(
    adapter: CountingClient, fenced_repo: lakefs.Repository
) -> None:
    expected = head(fenced_repo)  # the fence's read of the target
    staged = stage(fenced_repo, expected, {"data/out.txt": b"ours\n"})
    foreign = commit_on(fenced_repo, "main", {"data/foreign.txt": b"theirs\n"})  # slips in before the merge
    with pytest.raises(LakeFSPreconditionFailedError) as caught:
        fenced_merge(adapter, fenced_repo, staged, expected)
    found = rejection(caught.value)
    assert (found.kind, found.found_head, found.expected_head) == (hf.RejectionKind.HARD_FENCE, foreign, expected)
    assert head(fenced_repo) == foreign
    assert fenced_repo.ref("main").object("data/foreign.txt").reader().read() == b"theirs\n"
    assert fenced_repo.ref(staged).object("data/out.txt").reader().read() == b"ours\n"  # evidence intact


def _race(adapter: CountingClient, repo: lakefs.Repository, expected: str) -> tuple[list[str], list[Any]]:
    sources = [stage(repo, expected, {f"data/part-{i}.txt": f"{i}\n".encode()}) for i in range(CONCURRENT)]
    barrier = threading.Barrier(CONCURRENT)
    landed: list[str] = []
    refused: list[Any] = []
    lock = threading.Lock()

    def publish(source: str) -> None:
        barrier.wait(timeout=60)
        try:
            commit = fenced_merge(adapter, repo, source, expected)
        except LakeFSPreconditionFailedError as exc:
            with lock:
                refused.append(rejection(exc))
            return
        with lock:
            landed.append(commit)

    threads = [threading.Thread(target=publish, args=(s,)) for s in sources]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    return landed, refused


def test_concurrent_merges_on_one_expected_head_exactly_one_lands(
    adapter: CountingClient, fenced_repo: lakefs.Repository
) -> None:
    expected = head(fenced_repo)
    landed, refused = _race(adapter, fenced_repo, expected)
    assert len(landed) == 1, landed
    assert [r.kind for r in refused] == [hf.RejectionKind.HARD_FENCE] * (CONCURRENT - 1)
    assert {r.expected_head for r in refused} == {expected}
    winner = fenced_repo.branch("main").get_commit()
    assert winner.id == landed[0] and winner.parents[0] == expected
    parts = [o.path for o in fenced_repo.ref("main").objects(prefix="data/part-")]
    assert len(parts) == 1


def test_without_the_fence_the_same_race_stacks_every_merge(
    adapter: CountingClient, lakefence_repo: lakefs.Repository
) -> None:
    # The control: what the fence prevents. lakeFS recomputes each losing merge on the moved head.
    commit_on(lakefence_repo, "main", {"data/seed.txt": b"seed\n"}, "seed")
    expected = head(lakefence_repo)
    landed, refused = _race(adapter, lakefence_repo, expected)
    assert (len(landed), refused) == (CONCURRENT, [])
    parents = {adapter.get_commit(lakefence_repo.id, c).parents[0] for c in landed}
    assert len(parents - {expected}) == CONCURRENT - 1  # stacked on each other, not on the expected head


def test_merges_without_an_expected_head_pass_untouched(
    adapter: CountingClient, fenced_repo: lakefs.Repository
) -> None:
    base = fenced_repo.branch("main").get_commit().parents[0]  # an old head: any check would refuse
    staged = stage(fenced_repo, base, {"data/user.txt": b"user\n"})
    merged = adapter.merge(fenced_repo.id, staged, "main", "a user's merge", {"lakefence.role": "publish"})
    assert head(fenced_repo) == merged
    user_branch = fenced_repo.branch("feature").create("main")
    user_branch.object("data/feature.txt").upload(b"f\n")
    user_branch.commit("feature work")
    user_branch.merge_into(fenced_repo.branch("main"), message="a plain merge")
    assert fenced_repo.ref("main").object("data/feature.txt").reader().read() == b"f\n"


def test_users_own_hook_runs_and_its_rejection_is_told_apart(
    adapter: CountingClient, fenced_repo: lakefs.Repository
) -> None:
    install_user_hook(fenced_repo, "main", "user_policy", "user.reject")
    expected = head(fenced_repo)
    staged = stage(fenced_repo, expected, {"data/out.txt": b"ours\n"})

    with pytest.raises(LakeFSPreconditionFailedError) as caught:
        fenced_merge(adapter, fenced_repo, staged, expected, **{"user.reject": "yes"})
    found = rejection(caught.value)
    assert found.kind is hf.RejectionKind.USER_HOOK and found.run_id
    assert "USER_POLICY" in str(caught.value)
    assert head(fenced_repo) == expected

    stale = fenced_repo.branch("main").get_commit().parents[0]
    with pytest.raises(LakeFSPreconditionFailedError) as both:
        fenced_merge(adapter, fenced_repo, staged, stale, **{"user.reject": "yes"})
    assert rejection(both.value).kind is hf.RejectionKind.HARD_FENCE  # a lost race wins

    merged = fenced_merge(adapter, fenced_repo, staged, expected)
    assert head(fenced_repo) == merged and adapter.get_commit(fenced_repo.id, merged).parents[0] == expected


def test_a_source_without_the_action_file_is_not_fenced(
    adapter: CountingClient, lakefence_repo: lakefs.Repository
) -> None:
    # lakeFS reads actions from the merged commit: work built on a commit before the install is unguarded.
    # This is why a publication requiring the fence checks its *input* commit.
    before = commit_on(lakefence_repo, "main", {"data/seed.txt": b"seed\n"}, "seed")
    staged = stage(lakefence_repo, before, {"data/old-base.txt": b"x\n"})
    install_hard_fence(adapter, lakefence_repo.id, "main")
    assert check_hard_fence(adapter, lakefence_repo.id, staged).status is hf.FenceStatus.MISSING
    merged = fenced_merge(adapter, lakefence_repo, staged, before)  # stale, yet it lands
    assert head(lakefence_repo) == merged


def test_fence_installs_on_a_protected_target_and_guards_it(
    adapter: CountingClient, lakefence_client: lakefs.Client, lakefence_repo: lakefs.Repository
) -> None:
    commit_on(lakefence_repo, "main", {"data/seed.txt": b"seed\n"}, "seed")
    protect(lakefence_client, lakefence_repo, "main")
    result = install_hard_fence(adapter, lakefence_repo.id, "main")
    assert result.installed and head(lakefence_repo) == result.merge_commit
    assert probe_hard_fence(adapter, lakefence_repo.id, "main").enforced

    expected = head(lakefence_repo)
    staged = stage(lakefence_repo, expected, {"data/out.txt": b"ours\n"})
    stale = lakefence_repo.branch("main").get_commit().parents[0]
    with pytest.raises(LakeFSPreconditionFailedError) as caught:
        fenced_merge(adapter, lakefence_repo, staged, stale)
    assert rejection(caught.value).kind is hf.RejectionKind.HARD_FENCE
    merged = fenced_merge(adapter, lakefence_repo, staged, expected)
    assert head(lakefence_repo) == merged


def test_command_line(lakefence_server: LakeFSServerInfo, lakefence_repo: lakefs.Repository) -> None:
    env = {
        **os.environ,
        "LAKECTL_SERVER_ENDPOINT_URL": lakefence_server.url,
        "LAKECTL_CREDENTIALS_ACCESS_KEY_ID": lakefence_server.access_key_id,
        "LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY": lakefence_server.secret_access_key,
    }

    def cli(*args: str) -> tuple[int, dict[str, Any]]:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "airflow_lakefence.hardfence",
                *args,
                "--repository",
                lakefence_repo.id,
                "--branch",
                "main",
                "--from-env",
                "--json",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert lakefence_server.secret_access_key not in proc.stdout + proc.stderr
        return proc.returncode, json.loads(proc.stdout)

    code, out = cli("check")
    assert (code, out["status"], out["ok"]) == (1, "missing", False)
    code, out = cli("install")
    assert (code, out["installed"], out["status_before"]) == (0, True, "missing")
    assert out["merge_commit"] == head(lakefence_repo)
    code, out = cli("check", "--probe")
    assert (code, out["status"], out["probe_enforced"]) == (0, "ok", True)
    code, out = cli("install")
    assert (code, out["installed"]) == (0, False)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_lakefence.hardfence",
            "check",
            "--repository",
            "no-such-repo",
            "--branch",
            "main",
            "--from-env",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and "not found" in proc.stderr


def test_hook_methods_through_an_airflow_connection(
    lakefs_conn: dict[str, str], lakefence_repo: lakefs.Repository
) -> None:
    from airflow_lakefence.hooks.lakefs import LakeFSHook

    hook = LakeFSHook()
    assert hook.check_hard_fence(lakefence_repo.id, "main").status is hf.FenceStatus.MISSING
    result = hook.install_hard_fence(lakefence_repo.id, "main")
    assert result.installed and result.merge_commit == head(lakefence_repo)
    assert hook.check_hard_fence(lakefence_repo.id, result.merge_commit).status is hf.FenceStatus.OK
