"""The run state in lakeFS (airflow_lakefence.lakefs_adapter.run_state_store): write-once records that two live
tries can race for but never overwrite, what each read and write costs, and what survives what.

Real lakeFS over HTTP (and the local server); no Airflow: the adapter is what every Airflow version
uses, so these tests hold for 2.11 to 3.3 alike.
"""

from __future__ import annotations

import threading
from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.records.run_state import (
    pin_input,
    pin_key,
    pinned_input,
    record_evidence,
    record_publication,
    recorded_evidence,
    reported_publication,
)
from airflow_lakefence.exceptions import LakeFSRepositoryNotFoundError, RunStateConflictError
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from airflow_lakefence.lakefs_adapter.run_state_store import (
    RUN_STATE_BRANCH,
    LakeFSRunState,
    read_run_state,
    run_state_prefix,
)
from tests.integration.helpers import commit_files

KEY = PublicationKey("dag", "manual__1", "publish", -1)


@pytest.fixture
def client(lakefence_server: Any) -> LakeFSClient:
    return LakeFSClient(lakefence_server.endpoint, lakefence_server.access_key_id, lakefence_server.secret_access_key)


def calls(controls: Any) -> dict[str, int]:
    return {operation: n for operation, n in controls.counts().items() if n}


def state(client: LakeFSClient, repo: lakefs.Repository, *, fresh: bool = False, key: PublicationKey = KEY) -> Any:
    return LakeFSRunState(client, repo.id, key, source_branch="main", fresh=fresh)


def test_records_survive_every_try_and_a_first_try_reads_nothing(
    client: LakeFSClient, lakefence_repo: lakefs.Repository, lakefence_controls: Any
) -> None:
    commit = commit_files(lakefence_repo, "main", {"in/a.txt": "a"}, "input")
    first = state(client, lakefence_repo, fresh=True)
    lakefence_controls.reset_counts()
    assert pinned_input(first, "main") is None and reported_publication(first) is None
    assert calls(lakefence_controls) == {}  # a first try asks nothing
    pin_input(first, "main", commit)  # the very first record of the repository: makes its branch
    assert calls(lakefence_controls) == {"uploadObject": 2, "createBranch": 1}
    assert RUN_STATE_BRANCH in [b.id for b in lakefence_repo.branches(show_hidden=True)]
    lakefence_controls.reset_counts()
    record_publication(first, "c" * 64, 1, "merge")
    pin_input(first, commit, commit)  # a commit id pins itself: nothing written
    assert calls(lakefence_controls) == {"uploadObject": 1}
    # A later try (a retry, or a re-run after a clear) reads everything with one listing.
    retry = state(client, lakefence_repo)
    lakefence_controls.reset_counts()
    assert pinned_input(retry, "main") == commit
    assert reported_publication(retry) == {"output_ref": "c" * 64, "try_number": 1, "decision": "merge"}
    assert recorded_evidence(retry) == {}
    assert calls(lakefence_controls) == {"listObjects": 1}
    # Another task instance's records are its own.
    other = PublicationKey("dag", "manual__1", "other", -1)
    assert pinned_input(state(client, lakefence_repo, key=other), "main") is None


def test_the_latest_reported_publication_counts(client: LakeFSClient, lakefence_repo: lakefs.Repository) -> None:
    run = state(client, lakefence_repo, fresh=True)
    record_publication(run, "a" * 64, 1, "merge")
    record_publication(run, "b" * 64, 2, "replace")
    assert reported_publication(state(client, lakefence_repo))["output_ref"] == "b" * 64  # type: ignore[index]


def test_of_two_live_tries_racing_to_pin_exactly_one_wins(
    client: LakeFSClient, lakefence_repo: lakefs.Repository
) -> None:
    """Each try resolved the branch to a different commit: one pin is created, the other try stops."""
    commits = [commit_files(lakefence_repo, "main", {f"in/{n}.txt": str(n)}, f"input {n}") for n in range(2)]
    state(client, lakefence_repo, fresh=True).create("warm-up", 1)  # the branch exists: a pure race
    barrier = threading.Barrier(2)
    outcomes: list[Any] = [None, None]

    def pin(n: int) -> None:
        run = state(client, lakefence_repo, fresh=n == 0)
        barrier.wait()
        try:
            pin_input(run, "main", commits[n])
            outcomes[n] = commits[n]
        except RunStateConflictError as exc:
            outcomes[n] = exc

    threads = [threading.Thread(target=pin, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [o for o in outcomes if isinstance(o, str)]
    losers = [o for o in outcomes if isinstance(o, RunStateConflictError)]
    assert len(winners) == 1 and len(losers) == 1, outcomes
    assert pinned_input(state(client, lakefence_repo), "main") == winners[0]
    assert "the run's pin stands" in str(losers[0])


def test_the_same_pin_written_twice_is_no_conflict(client: LakeFSClient, lakefence_repo: lakefs.Repository) -> None:
    """A repeated write (a lost answer, or two tries that resolved the same commit) reads back as its own."""
    commit = commit_files(lakefence_repo, "main", {"in/a.txt": "a"}, "input")
    pin_input(state(client, lakefence_repo, fresh=True), "main", commit)
    pin_input(state(client, lakefence_repo, fresh=True), "main", commit)
    assert pinned_input(state(client, lakefence_repo), "main") == commit


def test_evidence_of_concurrent_tries_is_never_lost(client: LakeFSClient, lakefence_repo: lakefs.Repository) -> None:
    """Eight tries keep evidence at once: every entry is there (no read-modify-write of one list)."""
    barrier = threading.Barrier(8)

    def keep(n: int) -> None:
        run = state(client, lakefence_repo, fresh=n == 1)
        barrier.wait()
        record_evidence(run, f"lakefence-publish-x-t{n}", "PublishFenceError", AttemptId(KEY, n, f"ti-{n}"), "i")

    state(client, lakefence_repo, fresh=True).create("warm-up", 1)
    threads = [threading.Thread(target=keep, args=(n,)) for n in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    kept = recorded_evidence(state(client, lakefence_repo))
    assert sorted(kept) == sorted(f"lakefence-publish-x-t{n}" for n in range(1, 9))
    assert kept["lakefence-publish-x-t3"].attempt(KEY) == AttemptId(KEY, 3, "ti-3")


def test_records_are_readable_for_operators(client: LakeFSClient, lakefence_repo: lakefs.Repository) -> None:
    commit = commit_files(lakefence_repo, "main", {"in/a.txt": "a"}, "input")
    pin_input(state(client, lakefence_repo, fresh=True), "release", commit)
    records = read_run_state(client, lakefence_repo.id, KEY)
    assert records == {pin_key("release"): {"ref": "release", "commit": commit}}
    paths = [o.path for o in lakefence_repo.ref(RUN_STATE_BRANCH).objects(prefix=run_state_prefix(KEY))]
    assert paths == [run_state_prefix(KEY) + pin_key("release")]


def test_a_missing_repository_is_not_an_empty_run_state(
    client: LakeFSClient, lakefence_repo: lakefs.Repository
) -> None:
    missing = LakeFSRunState(client, "no-such-repository-x1", KEY, source_branch="main", fresh=False)
    with pytest.raises(LakeFSRepositoryNotFoundError):
        missing.get(pin_key("main"))
