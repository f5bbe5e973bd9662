"""Merge-only replacement and relocation through the product's adapter, on protected and plain targets.

A chain of abandoned publications is replaced link by link; after each link the target's tree
equals the new staged commit's (or the input's), each link costs the same calls, and the hard fence
guards the final merge of each link.
"""

from __future__ import annotations

import uuid

import lakefs
import pytest

from airflow_lakefence.core.fences import hard as hf
from airflow_lakefence.core.fences.publish import HeadState
from airflow_lakefence.core.publication.replacement import replace_by_merge, temp_branch_name
from airflow_lakefence.exceptions import LakeFSPreconditionFailedError
from airflow_lakefence.hardfence import install_hard_fence
from tests.integration.hard_fence_helpers import CountingClient, commit_on, head, protect, stage

pytestmark = pytest.mark.hard_fence


def tree(repo: lakefs.Repository, ref: str) -> dict[str, bytes]:
    return {o.path: repo.ref(ref).object(o.path).reader().read() for o in repo.ref(ref).objects()}


def head_state(adapter: CountingClient, repo: lakefs.Repository) -> HeadState:
    c = adapter.get_commit(repo.id, "main")
    return HeadState(c.id, c.parents, c.metadata, c.version)


def link(adapter: CountingClient, repo: lakefs.Repository, input_commit: str, staged: str) -> tuple[str, int]:
    adapter.calls.clear()
    outcome = replace_by_merge(
        adapter,
        repository=repo.id,
        target="main",
        head=head_state(adapter, repo),
        input_commit=input_commit,
        staged_commit=staged,
        temp_branch=temp_branch_name(f"lakefence-test-{uuid.uuid4().hex[:8]}"),
        message="replace",
        metadata={"lakefence.role": "publish"},
    )
    assert sum(adapter.calls.values()) - adapter.calls["get_commit"] == outcome.calls
    return outcome.output_ref, outcome.calls


@pytest.fixture
def chain_repo(
    request: pytest.FixtureRequest,
    adapter: CountingClient,
    lakefence_client: lakefs.Client,
    lakefence_repo: lakefs.Repository,
) -> lakefs.Repository:
    commit_on(lakefence_repo, "main", {"data/a": b"a0", "data/keep": b"k"}, "input")
    install_hard_fence(adapter, lakefence_repo.id, "main")
    if request.param == "protected":
        protect(lakefence_client, lakefence_repo, "main")
    return lakefence_repo


@pytest.mark.parametrize("chain_repo", ["plain", "protected"], indirect=True)
def test_a_chain_of_replacements_and_a_relocation(adapter: CountingClient, chain_repo: lakefs.Repository) -> None:
    repo = chain_repo
    input_commit = head(repo)
    before = tree(repo, input_commit)
    c0 = stage(repo, input_commit, {"data/a": b"a-c0", "data/only0": b"x"})
    p0 = adapter.merge(repo.id, c0, "main", "publish", hf.expected_head_metadata(input_commit))

    c1 = stage(repo, input_commit, {"data/a": b"a-c1", "data/only1": b"y"})
    m1, calls = link(adapter, repo, input_commit, c1)
    assert calls == 5 and head(repo) == m1
    assert tree(repo, m1) == tree(repo, c1)
    first = adapter.get_commit(repo.id, m1)
    assert first.parents[0] == p0 and hf.is_chain_link(first.metadata, first.parents[0])

    c2 = stage(repo, input_commit, {"data/only2": b"z"})
    m2, calls = link(adapter, repo, input_commit, c2)
    assert calls == 5 and tree(repo, m2) == tree(repo, c2)  # the same cost for a longer chain

    m3, calls = link(adapter, repo, input_commit, input_commit)  # relocation
    assert calls == 4 and tree(repo, m3) == before
    m4, calls = link(adapter, repo, input_commit, input_commit)  # relocating a relocation: nothing to do
    assert (calls, m4) == (0, m3)
    c5 = stage(repo, input_commit, {"data/a": b"a-c5"})
    m5, calls = link(adapter, repo, input_commit, c5)  # replacing a relocation link: no revert needed
    assert calls == 4 and tree(repo, m5) == tree(repo, c5)
    assert [b for b, _ in adapter.list_branches(repo.id, "lakefence-test")] == []


def test_the_final_merge_is_fenced(adapter: CountingClient, lakefence_repo: lakefs.Repository) -> None:
    input_commit = commit_on(lakefence_repo, "main", {"data/a": b"a0"}, "input")
    install_hard_fence(adapter, lakefence_repo.id, "main")
    input_commit = head(lakefence_repo)
    c0 = stage(lakefence_repo, input_commit, {"data/a": b"a-c0"})
    adapter.merge(lakefence_repo.id, c0, "main", "publish", hf.expected_head_metadata(input_commit))
    stale = head_state(adapter, lakefence_repo)
    foreign = commit_on(lakefence_repo, "main", {"data/foreign": b"f"})
    c1 = stage(lakefence_repo, input_commit, {"data/a": b"a-c1"})
    with pytest.raises(LakeFSPreconditionFailedError) as caught:
        replace_by_merge(
            adapter,
            repository=lakefence_repo.id,
            target="main",
            head=stale,
            input_commit=input_commit,
            staged_commit=c1,
            temp_branch="lakefence-test-fenced-mo",
            message="replace",
            metadata={},
        )
    assert hf.classify_rejection(str(caught.value)).kind is hf.RejectionKind.HARD_FENCE
    assert head(lakefence_repo) == foreign
    assert [b for b, _ in adapter.list_branches(lakefence_repo.id, "lakefence-test")] == []
