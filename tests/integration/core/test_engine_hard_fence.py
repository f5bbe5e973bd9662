"""The publish engine with the hard fence and on protected targets: outcomes and exact lakeFS calls.

The engine runs with the product's adapter against the session's lakeFS (local server or real
lakeFS, per ``--lakefs-backend``) and a stand-in attempt fence; the adapter counts its calls, split
at the job. Each test asserts the target's head and parents, the published tree, the error class
and the calls of every decision (docs/hard-fence.md, "cost of each path").
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.engine import AttemptLocations, PublishEngine, PublishRequest, PublishResult
from airflow_lakefence.core.fences import hard as hf
from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.staging.cleaner import EVIDENCE_KEY
from airflow_lakefence.exceptions import (
    HardFenceMissingError,
    HardFenceRaceError,
    LakeFSAuthError,
    LakeFSBranchProtectedError,
    LakeFSHardFenceRejectedError,
    LakeFSHookRejectedError,
    MergeHookRejectedError,
    PublishFenceError,
    PublishRaceError,
    StaleAttemptError,
)
from airflow_lakefence.hardfence import install_hard_fence
from tests.integration.hard_fence_helpers import CountingClient, commit_on, head, install_user_hook, protect

pytestmark = pytest.mark.hard_fence

KEY = PublicationKey("dag", "run-1", "publish")


@dataclass
class StandInFence:
    """The attempt fence port: always current."""

    attempt: AttemptId

    def arm(self) -> None:
        pass

    def stale_reason(self) -> str | None:
        return None

    def was_killed(self) -> bool:
        return False

    def fail(self, where: str, reason: str) -> Any:
        raise StaleAttemptError(f"stale attempt {where}: {reason}")


@dataclass
class Run:
    result: PublishResult | None
    error: BaseException | None
    before_job: Counter[str]
    after_job: Counter[str]

    @property
    def after(self) -> dict[str, int]:
        return {k: v for k, v in self.after_job.items() if v}


def publish(
    adapter: CountingClient,
    repo: lakefs.Repository,
    input_commit: str,
    try_number: int,
    files: dict[str, str],
    *,
    during_job: Any = None,
    **options: Any,
) -> Run:
    """Run one attempt (workspace mode) and count its calls before and after the job."""
    hf.forget_checks()
    adapter.calls.clear()
    marks: dict[str, Counter[str]] = {}

    def job(locations: AttemptLocations) -> None:
        marks["job"] = Counter(adapter.calls)
        assert locations.workspace is not None
        for path, text in files.items():
            target = Path(locations.workspace) / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        if during_job is not None:
            during_job()

    attempt = AttemptId(KEY, try_number, f"ti-{try_number}-{uuid.uuid4().hex[:6]}")
    request = PublishRequest(repository=repo.id, target_branch="main", input_ref=input_commit, **options)
    engine = PublishEngine(adapter, StandInFence(attempt), request)
    result = error = None
    try:
        result = engine.run(job)
    except Exception as exc:
        error = exc
    before = marks.get("job", Counter(adapter.calls))
    after = Counter(adapter.calls)
    after.subtract(before)
    return Run(result, error, before, after)


def tree(repo: lakefs.Repository, ref: str) -> dict[str, bytes]:
    return {
        o.path: repo.ref(ref).object(o.path).reader().read()
        for o in repo.ref(ref).objects()
        if not o.path.startswith("_lakefs_actions/")
    }


def leftovers(adapter: CountingClient, repo: lakefs.Repository) -> list[str]:
    return [b for b, _ in adapter.list_branches(repo.id, "lakefence")]


@pytest.fixture
def fenced(adapter: CountingClient, lakefence_repo: lakefs.Repository) -> tuple[lakefs.Repository, str]:
    """A repository whose ``main`` carries the hard fence; the input is its head."""
    commit_on(lakefence_repo, "main", {"in/data.txt": b"input"}, "input")
    install_hard_fence(adapter, lakefence_repo.id, "main")
    return lakefence_repo, head(lakefence_repo)


# -- the fence required, present, missing ---------------------------------------------------------


def test_required_fence_missing_fails_before_the_job(
    adapter: CountingClient, lakefence_repo: lakefs.Repository
) -> None:
    input_commit = commit_on(lakefence_repo, "main", {"in/data.txt": b"input"}, "input")
    ran: list[bool] = []
    run = publish(
        adapter,
        lakefence_repo,
        input_commit,
        1,
        {"out/a.txt": "a"},
        during_job=lambda: ran.append(True),
        hard_fence="require",
    )
    assert isinstance(run.error, HardFenceMissingError) and "not installed" in str(run.error)
    assert not ran and head(lakefence_repo) == input_commit and leftovers(adapter, lakefence_repo) == []
    assert run.before_job == {"get_commit": 1, "create_branch": 1, "get_object": 1, "delete_branch": 1}


def test_first_try_merge_with_the_fence_costs_three_calls_after_the_job(
    adapter: CountingClient, fenced: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = fenced
    run = publish(adapter, repo, input_commit, 1, {"out/a.txt": "a"}, hard_fence="require")
    assert run.error is None and run.result is not None and run.result.decision == "merge"
    # The input is the target's HEAD, the installer's merge: it vouches for the fence (no getObject).
    assert run.before_job == {"get_commit": 1, "create_branch": 1}
    assert run.after == {"upload_object": 1, "commit": 1, "merge": 1, "delete_branch": 1}
    merged = adapter.get_commit(repo.id, "main")
    assert merged.id == run.result.output_ref and merged.parents[0] == input_commit
    assert merged.metadata[hf.EXPECTED_HEAD_KEY] == input_commit
    # The publication left the action file as it was, and says so for the next attempt.
    assert merged.metadata[hf.FENCE_KEY] == str(hf.HARD_FENCE_VERSION)
    assert repo.ref(merged.id).object(hf.ACTION_PATH).reader().read() == hf.render_action_bytes()
    assert tree(repo, "main")["out/a.txt"] == b"a"


def test_a_publication_vouches_for_the_fence_of_the_next_one(
    adapter: CountingClient, fenced: tuple[lakefs.Repository, str]
) -> None:
    """The next run builds on the publication (the target's HEAD): no getObject, in a new process too."""
    repo, input_commit = fenced
    first = publish(adapter, repo, input_commit, 1, {"out/a.txt": "a"}, hard_fence="require")
    assert first.result is not None
    run = publish(adapter, repo, first.result.output_ref, 1, {"out/b.txt": "b"}, hard_fence="require")
    assert run.error is None and run.result is not None and run.result.decision == "merge"
    assert run.before_job == {"get_commit": 1, "create_branch": 1}
    assert run.after == {"upload_object": 1, "commit": 1, "merge": 1, "delete_branch": 1}
    assert adapter.get_commit(repo.id, "main").parents[0] == first.result.output_ref


def test_a_head_that_does_not_vouch_is_read(adapter: CountingClient, fenced: tuple[lakefs.Repository, str]) -> None:
    """A user's commit on the target says nothing about the fence: the action file is read (one getObject)."""
    repo, _ = fenced
    user_commit = commit_on(repo, "main", {"in/more.txt": b"more"}, "a user's commit")
    run = publish(adapter, repo, user_commit, 1, {"out/a.txt": "a"}, hard_fence="require")
    assert run.error is None and run.result is not None and run.result.decision == "merge"
    assert run.before_job == {"get_commit": 1, "create_branch": 1, "get_object": 1}
    assert adapter.get_commit(repo.id, "main").metadata[hf.FENCE_KEY] == str(hf.HARD_FENCE_VERSION)


def test_a_job_writing_under_the_actions_directory_is_verified_and_vouches_for_nothing(
    adapter: CountingClient, fenced: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = fenced
    # The fence's own file, rewritten as it is: any write there voids what the engine knows.
    files = {"out/a.txt": "a", hf.ACTION_PATH: hf.render_action()}
    run = publish(adapter, repo, input_commit, 1, files, hard_fence="require")
    assert run.error is None and run.result is not None and run.result.decision == "merge"
    # The staged commit may no longer carry the fence: the merge is verified, and vouches for nothing.
    assert run.after == {"upload_object": 2, "commit": 1, "merge": 1, "get_commit": 1, "delete_branch": 1}
    merged = adapter.get_commit(repo.id, "main")
    assert merged.parents[0] == input_commit and hf.FENCE_KEY not in merged.metadata


def direct(
    adapter: CountingClient, repo: lakefs.Repository, input_commit: str, job: Any, **options: Any
) -> tuple[PublishResult | None, BaseException | None]:
    """One direct-mode attempt without ``output_prefixes``: ``job(staging_branch)`` writes into S."""
    hf.forget_checks()
    adapter.calls.clear()
    attempt = AttemptId(KEY, 1, f"ti-1-{uuid.uuid4().hex[:6]}")
    request = PublishRequest(
        repository=repo.id, target_branch="main", input_ref=input_commit, write_mode="direct", **options
    )
    try:
        return PublishEngine(adapter, StandInFence(attempt), request).run(lambda loc: job(loc.staging_branch)), None
    except Exception as exc:
        return None, exc


def test_a_direct_job_that_kept_the_action_file_is_not_read_back(
    adapter: CountingClient, fenced: tuple[lakefs.Repository, str]
) -> None:
    """The diff beside the merge proves the action file kept: lakeFS's fence checked the merge."""
    repo, input_commit = fenced
    result, error = direct(
        adapter, repo, input_commit, lambda s: adapter.upload_bytes(repo.id, s, "out/a.txt", b"a"), hard_fence="require"
    )
    assert error is None and result is not None and result.decision == "merge"
    assert adapter.calls["diff_refs"] == 1 and adapter.calls["get_commit"] == 1  # the target's HEAD, before the job
    assert adapter.get_commit(repo.id, "main").parents[0] == input_commit


def test_a_direct_job_that_dropped_the_action_file_is_read_back_and_its_race_caught(
    adapter: CountingClient, fenced: tuple[lakefs.Repository, str]
) -> None:
    """lakeFS loads a merge's hooks from the merged tree: a job that deletes the fence's action file in
    its staging branch merges unfenced. The diff shows it, the merge is read back, and a writer that
    committed meanwhile is caught (PublishRaceError, the staging branch kept)."""
    repo, input_commit = fenced

    def job(staging: str) -> None:
        adapter.upload_bytes(repo.id, staging, "out/a.txt", b"a")
        adapter.delete_objects(repo.id, staging, [hf.ACTION_PATH])
        commit_on(repo, "main", {"other/x.txt": b"x"}, "a racing writer")

    racer_parent = head(repo)
    result, error = direct(adapter, repo, input_commit, job, hard_fence="require")
    assert result is None and isinstance(error, PublishRaceError), error
    assert adapter.calls["diff_refs"] == 1
    landed = adapter.get_commit(repo.id, "main")  # the unfenced merge landed on the racer's commit
    racer = adapter.get_commit(repo.id, landed.parents[0])
    assert landed.parents[0] != input_commit and racer.parents[0] == racer_parent
    assert error.staging_branch is not None and error.staging_branch in leftovers(adapter, repo)


def test_soft_merge_also_names_its_expected_head_and_costs_five(
    adapter: CountingClient, fenced: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = fenced
    run = publish(adapter, repo, input_commit, 1, {"out/a.txt": "a"}, hard_fence="off")
    assert run.error is None and run.result is not None and run.result.decision == "merge"
    assert run.after == {"upload_object": 1, "commit": 1, "get_commit": 2, "merge": 1, "delete_branch": 1}
    assert adapter.get_commit(repo.id, "main").metadata[hf.EXPECTED_HEAD_KEY] == input_commit


def test_a_foreign_commit_during_the_job_is_refused_by_lakefs(
    adapter: CountingClient, fenced: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = fenced
    foreign: list[str] = []
    run = publish(
        adapter,
        repo,
        input_commit,
        1,
        {"out/a.txt": "a"},
        during_job=lambda: foreign.append(commit_on(repo, "main", {"in/other.txt": b"theirs"})),
        hard_fence="require",
    )
    assert isinstance(run.error, HardFenceRaceError) and isinstance(run.error, PublishFenceError)
    assert foreign[0] in str(run.error) and input_commit in str(run.error)
    assert head(repo) == foreign[0] and tree(repo, "main")["in/other.txt"] == b"theirs"
    # Failed closed with evidence: the staging branch is kept, marked. The target is read only after
    # lakeFS refused the merge (to tell a foreign commit from an earlier try's publication).
    kept = leftovers(adapter, repo)
    assert kept == [run.error.staging_branch]
    assert run.after == {"upload_object": 1, "commit": 2, "merge": 1, "get_commit": 1}


def test_an_earlier_try_publishing_during_the_job_is_replaced_after_the_refusal(
    adapter: CountingClient, fenced: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = fenced
    zombie: list[str] = []

    def zombie_publishes() -> None:  # try 1, already cleared, publishes while try 2's job runs
        saved = Counter(adapter.calls)
        run = publish(adapter, repo, input_commit, 1, {"out/a.txt": "try1", "out/only1.txt": "x"}, hard_fence="require")
        assert run.result is not None
        zombie.append(run.result.output_ref)
        adapter.calls.clear()
        adapter.calls.update(saved)

    second = publish(
        adapter, repo, input_commit, 2, {"out/a.txt": "try2"}, during_job=zombie_publishes, hard_fence="require"
    )
    assert second.error is None and second.result is not None and second.result.decision == "replace"
    assert tree(repo, "main") == {"in/data.txt": b"input", "out/a.txt": b"try2"}
    # The optimistic merge conflicts with the zombie's publication (409: lakeFS recomputed it on the
    # moved head), the target is read, and the zombie's publication is replaced (hard reset, verified).
    assert head(repo) == second.result.output_ref
    assert second.after == {
        "upload_object": 1,
        "commit": 1,
        "merge": 1,
        "get_commit": 2,
        "hard_reset": 1,
        "delete_branch": 1,
    }


def test_a_users_pre_merge_hook_rejection_is_its_own_error(
    adapter: CountingClient, fenced: tuple[lakefs.Repository, str]
) -> None:
    repo, _ = fenced
    install_user_hook(repo, "main", "user_policy", "owner")
    input_commit = head(repo)
    run = publish(
        adapter, repo, input_commit, 1, {"out/a.txt": "a"}, hard_fence="require", commit_metadata={"owner": "me"}
    )
    assert isinstance(run.error, MergeHookRejectedError) and not isinstance(run.error, HardFenceRaceError)
    assert "USER_POLICY" in str(run.error)
    assert head(repo) == input_commit and leftovers(adapter, repo) == [run.error.staging_branch]


# -- replacement and relocation: hard reset, merge-only, protected -----------------------------------


def _abandoned(adapter: CountingClient, repo: lakefs.Repository, input_commit: str, **options: Any) -> str:
    first = publish(adapter, repo, input_commit, 1, {"out/a.txt": "try1", "out/only1.txt": "x"}, **options)
    assert first.result is not None and first.result.decision == "merge", first.error
    return first.result.output_ref


@pytest.mark.parametrize("mode", ["require", "off"])
def test_replace_by_merge_on_request(adapter: CountingClient, fenced: tuple[lakefs.Repository, str], mode: str) -> None:
    repo, input_commit = fenced
    abandoned = _abandoned(adapter, repo, input_commit, hard_fence=mode)
    second = publish(adapter, repo, input_commit, 2, {"out/a.txt": "try2"}, hard_fence=mode, replace_by_merge=True)
    assert second.error is None and second.result is not None and second.result.decision == "replace"
    link = adapter.get_commit(repo.id, "main")
    assert link.id == second.result.output_ref and link.parents[0] == abandoned
    assert hf.is_chain_link(link.metadata, abandoned)
    assert tree(repo, "main") == {"in/data.txt": b"input", "out/a.txt": b"try2"}
    # Merge-only: createBranch, revert, two merges, deleteBranch (the temporary branch); with the
    # fence lakeFS checks the final merge, without it the target is read before and verified after.
    expected = {"upload_object": 1, "commit": 1, "create_branch": 1, "revert": 1, "merge": 2, "delete_branch": 2}
    if mode == "off":
        expected["get_commit"] = 2
    assert second.after == expected

    third = publish(
        adapter, repo, input_commit, 3, {}, hard_fence=mode, replace_by_merge=True, allow_empty_workspace=True
    )
    assert third.result is not None and third.result.decision == "relocate", third.error
    assert tree(repo, "main") == {"in/data.txt": b"input"}
    assert adapter.get_commit(repo.id, "main").parents[0] == link.id  # the chain goes on


def test_protected_target_replaces_by_merges_automatically(
    adapter: CountingClient,
    lakefence_client: lakefs.Client,
    fenced: tuple[lakefs.Repository, str],
) -> None:
    repo, input_commit = fenced
    abandoned = _abandoned(adapter, repo, input_commit, hard_fence="require")
    protect(lakefence_client, repo, "main")
    with pytest.raises(LakeFSBranchProtectedError) as refused:
        adapter.hard_reset(repo.id, "main", input_commit)
    assert not isinstance(refused.value, LakeFSAuthError) and "protected" in str(refused.value)

    second = publish(adapter, repo, input_commit, 2, {"out/a.txt": "try2"}, hard_fence="require")
    assert second.error is None and second.result is not None and second.result.decision == "replace"
    assert adapter.get_commit(repo.id, "main").parents[0] == abandoned
    assert tree(repo, "main") == {"in/data.txt": b"input", "out/a.txt": b"try2"}
    # The publish fence reads the target (a hard reset is not fenced), the reset is refused (403),
    # then the five merge-only calls.
    assert second.after == {
        "upload_object": 1,
        "commit": 1,
        "get_commit": 1,
        "hard_reset": 1,
        "create_branch": 1,
        "revert": 1,
        "merge": 2,
        "delete_branch": 2,
    }
    third = publish(adapter, repo, input_commit, 3, {"out/a.txt": "try3"}, hard_fence="require")
    assert third.result is not None and third.result.decision == "replace", third.error
    assert tree(repo, "main") == {"in/data.txt": b"input", "out/a.txt": b"try3"}
    assert leftovers(adapter, repo) == []


@pytest.mark.parametrize(
    ("mode", "protected"),
    [("require", False), ("off", False), ("require", True)],
    ids=["hard-by-request", "soft-by-request", "hard-protected"],
)
def test_a_users_pre_merge_hook_runs_on_a_merge_only_replacement(
    adapter: CountingClient,
    lakefence_client: lakefs.Client,
    fenced: tuple[lakefs.Repository, str],
    mode: str,
    protected: bool,
) -> None:
    """The user's own hook sees the replacement's final merge (a chain link) and rejects it: reported
    as the user's rejection, never as the hard fence losing a race; nothing published, evidence kept."""
    repo, _ = fenced
    # The user's policy lets first publications through and refuses replacements (chain links).
    install_user_hook(repo, "main", "no_replacements", hf.REPLACES_KEY)
    input_commit = head(repo)
    abandoned = _abandoned(adapter, repo, input_commit, hard_fence=mode)  # the hook ran and let it pass
    published = tree(repo, "main")
    assert published == {"in/data.txt": b"input", "out/a.txt": b"try1", "out/only1.txt": b"x"}
    if protected:
        protect(lakefence_client, repo, "main")  # merge-only automatically (the hard reset is refused)
    second = publish(
        adapter, repo, input_commit, 2, {"out/a.txt": "try2"}, hard_fence=mode, replace_by_merge=not protected
    )
    error = second.error
    assert isinstance(error, MergeHookRejectedError) and not isinstance(error, PublishRaceError), error
    assert f"USER_POLICY: merges tagged {hf.REPLACES_KEY} are not allowed" in str(error)
    cause = error.__cause__
    assert isinstance(cause, LakeFSHookRejectedError) and not isinstance(cause, LakeFSHardFenceRejectedError)
    assert cause.run_id and cause.run_id in str(error)  # the message names the hook's run
    # Nothing published: the target still shows try 1's publication.
    assert head(repo) == abandoned and tree(repo, "main") == published
    # Evidence: the staging branch is kept, marked, holding try 2's staged output; the temporary
    # merge-only branch is gone.
    assert leftovers(adapter, repo) == [error.staging_branch]
    marker = adapter.get_commit(repo.id, error.staging_branch)
    assert marker.metadata[EVIDENCE_KEY] == "MergeHookRejectedError"
    assert tree(repo, marker.parents[0]) == {"in/data.txt": b"input", "out/a.txt": b"try2"}
    # The replacement got as far as its final merge (the one the hook refused), then the evidence
    # marker commit; with the soft fence, or on a protected target, the target is read first.
    expected = {"upload_object": 1, "commit": 2, "create_branch": 1, "revert": 1, "merge": 2, "delete_branch": 1}
    if mode == "off" or protected:
        expected["get_commit"] = 1
    if protected:
        expected["hard_reset"] = 1  # refused (403), then merge-only
    assert second.after == expected
