"""The cleaner's rules (core/staging/cleaner.py), exhaustively over its inputs."""

from __future__ import annotations

import pytest

from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.names.staging_names import key_hash, staging_branch_name
from airflow_lakefence.core.publication.abandonment import FAILED_STATES, LIVE_STATES, PENDING_STATES
from airflow_lakefence.core.publication.replacement import temp_branch_name
from airflow_lakefence.core.records.metadata import (
    ROLE_PUBLISH,
    ROLE_STAGE,
    LakeFenceRecord,
    decode_metadata,
    encode_metadata,
)
from airflow_lakefence.core.staging.cleaner import (
    EVIDENCE_KEY,
    StagingBranch,
    evidence_metadata,
    evidence_of,
    inspect_branch,
    known_keys,
    plan_cleanup,
    remember,
)

KEY = PublicationKey("dag", "run1", "publish")
OTHER = PublicationKey("dag", "run0", "publish")
INPUT = "i" * 64
STATES = sorted(LIVE_STATES | PENDING_STATES | FAILED_STATES | {"success"})


def attempt(try_number: int, key: PublicationKey = KEY) -> AttemptId:
    return AttemptId(key, try_number, f"ti-{key.run_id}-{try_number}")


def staged(try_number: int = 1, key: PublicationKey = KEY, evidence: str | None = None) -> StagingBranch:
    a = attempt(try_number, key)
    meta = evidence_metadata(a, INPUT, evidence) if evidence else encode_metadata(LakeFenceRecord(a, ROLE_STAGE, INPUT))
    branch = inspect_branch(staging_branch_name(a), f"c{try_number}", meta, "lakefence")
    assert branch is not None
    return branch


def unstaged(try_number: int = 1, key: PublicationKey = KEY) -> StagingBranch:
    # HEAD is the input commit, which carries the *previous* run's publish record.
    previous = encode_metadata(LakeFenceRecord(attempt(1, OTHER), ROLE_PUBLISH, "p" * 64))
    branch = inspect_branch(staging_branch_name(attempt(try_number, key)), INPUT, previous, "lakefence")
    assert branch is not None
    return branch


def clean(_branch: StagingBranch) -> bool:
    """``has_uncommitted`` of branches without uncommitted changes."""
    return False


def no_evidence(_key: PublicationKey) -> tuple[str, ...]:
    """``run_evidence`` of task instances whose last try recorded no evidence."""
    return ()


def plan(branches: list[StagingBranch], **kwargs: object) -> dict[str, tuple[bool, str]]:
    options: dict[str, object] = {
        "keys": known_keys(branches),
        "states": {},
        "first_seen": {},
        "now": 1000.0,
        "has_uncommitted": clean,
        "run_evidence": no_evidence,
    }
    options.update(kwargs)
    return {d.branch: (d.delete, d.reason) for d in plan_cleanup(branches, **options)}  # type: ignore[arg-type]


def test_evidence_marker_round_trip() -> None:
    meta = evidence_metadata(attempt(2), INPUT, "PublishRaceError")
    assert evidence_of(meta) == "PublishRaceError"
    record = decode_metadata(meta)
    assert record is not None and record.role == ROLE_STAGE and record.attempt == attempt(2)
    assert evidence_of({}) is None and evidence_of(None) is None and evidence_of({EVIDENCE_KEY: ""}) is None
    with pytest.raises(ValueError, match="class name"):
        evidence_metadata(attempt(1), INPUT, "")


def test_inspect_branch() -> None:
    assert inspect_branch("main", "c", {}, "lakefence") is None
    assert inspect_branch(staging_branch_name(attempt(1)), "c", {}, "other") is None
    assert staged().record is not None and staged().evidence is None
    assert staged(evidence="PublishFenceError").evidence == "PublishFenceError"
    # A record of another attempt on HEAD (the input's own publication) is not this branch's record.
    assert unstaged().record is None
    # Nor is another try's stage record, nor an evidence key on a commit that is not the branch's.
    other_try = encode_metadata(LakeFenceRecord(attempt(2), ROLE_STAGE, INPUT))
    assert inspect_branch(staging_branch_name(attempt(1)), "c", other_try, "lakefence").record is None  # type: ignore[union-attr]
    foreign_evidence = evidence_metadata(attempt(1, OTHER), INPUT, "PublishFenceError")
    branch = inspect_branch(staging_branch_name(attempt(1)), "c", foreign_evidence, "lakefence")
    assert branch is not None and branch.evidence is None


@pytest.mark.parametrize("state", [*STATES, None])
@pytest.mark.parametrize("is_staged", [True, False])
def test_identified_branch_follows_the_task_instance_state(state: str | None, is_staged: bool) -> None:
    branch = staged() if is_staged else unstaged()
    decisions = plan([branch], keys={key_hash(KEY): KEY}, states={KEY: state})
    delete, reason = decisions[branch.name]
    # A staged, unmarked branch may be evidence whose marker failed: only a success whose last try
    # recorded no such evidence proves it is not (not even a task instance that is gone).
    assert delete == (state not in LIVE_STATES and (not is_staged or state == "success")), reason
    if state is None:
        assert "no longer exists" in reason


@pytest.mark.parametrize("is_staged", [True, False])
def test_an_unknown_state_counts_as_alive(is_staged: bool) -> None:
    branch = staged() if is_staged else unstaged()
    delete, reason = plan([branch], keys={key_hash(KEY): KEY}, states={KEY: "some_future_state"})[branch.name]
    assert not delete and "treated as alive" in reason


def test_a_newer_try_kills_the_older_unstaged_whatever_the_state() -> None:
    old, new = unstaged(1), staged(2)
    for state in ("running", "none", "success", None):
        decisions = plan([old, new], states={KEY: state})
        assert decisions[old.name] == (True, "try 2 of the same task instance exists")
        assert decisions[new.name][0] == (state == "success")


def test_a_newer_try_never_kills_an_older_staged_unmarked_branch_unless_success() -> None:
    old, new = staged(1), unstaged(2)
    for state, deleted in (("running", False), ("up_for_retry", False), ("failed", False), ("success", True)):
        delete, reason = plan([old, new], states={KEY: state})[old.name]
        assert delete == deleted, reason


def test_an_unstaged_sibling_of_a_staged_branch_is_identified_by_its_key_hash() -> None:
    old, new = unstaged(1), staged(1, evidence=None)
    assert old.info.key_hash == new.info.key_hash
    keys = known_keys([old])
    assert keys == {}
    assert known_keys([old, new]) == {key_hash(KEY): KEY}
    assert known_keys([old], [KEY]) == {key_hash(KEY): KEY}


@pytest.mark.parametrize("state", ["failed", "running", None])
@pytest.mark.parametrize("delete_evidence", [False, True])
def test_evidence_is_kept_unless_asked(state: str | None, delete_evidence: bool) -> None:
    branch = staged(evidence="PublishFenceError")
    delete, reason = plan([branch], states={KEY: state}, delete_evidence=delete_evidence)[branch.name]
    if not delete_evidence:
        assert not delete and "evidence of PublishFenceError" in reason
    else:
        assert delete == (state != "running")


def test_evidence_is_kept_even_with_a_newer_try() -> None:
    branch, newer = staged(1, evidence="PublishFenceError"), staged(2)
    assert plan([branch, newer], states={KEY: "running"})[branch.name][0] is False


@pytest.mark.parametrize(
    ("max_age", "seen", "delete"),
    [
        (None, None, False),
        (None, (INPUT, 0.0), False),
        (60.0, None, False),  # first sight: only starts the clock
        (60.0, (INPUT, 950.0), False),  # seen 50 s ago
        (60.0, (INPUT, 940.0), True),  # seen 60 s ago, unchanged
        (60.0, ("moved", 0.0), False),  # HEAD changed since: the clock restarts
        (0.0, (INPUT, 1000.0), True),
    ],
)
def test_unidentified_branch_needs_max_age_of_observation(
    max_age: float | None, seen: tuple[str, float] | None, delete: bool
) -> None:
    branch = unstaged()
    first_seen = {} if seen is None else {branch.name: seen}
    decided, reason = plan([branch], keys={}, first_seen=first_seen, max_age=max_age)[branch.name]
    assert decided is delete, reason


def test_a_key_not_looked_up_is_kept() -> None:
    branch = staged()
    assert plan([branch], states={})[branch.name] == (False, "its task instance's state was not looked up")


def test_remember_keeps_the_first_sighting_of_an_unchanged_head() -> None:
    kept, gone = unstaged(1), staged(1, OTHER)
    decisions = plan_cleanup(
        [kept, gone], keys={}, states={OTHER: "success"}, first_seen={}, now=10.0, run_evidence=no_evidence
    )
    assert [d.delete for d in decisions] == [False, True]
    memory = remember([kept, gone], decisions, {kept.name: (INPUT, 3.0), gone.name: ("c1", 1.0)}, 10.0)
    assert memory == {kept.name: (INPUT, 3.0)}
    assert remember([kept, gone], decisions, {kept.name: ("moved", 3.0)}, 10.0) == {kept.name: (INPUT, 10.0)}


def test_decision_to_dict() -> None:
    (decision,) = plan_cleanup(
        [staged()], keys={}, states={KEY: "success"}, first_seen={}, now=0.0, run_evidence=no_evidence
    )
    data = decision.to_dict()
    assert data["dag_id"] == "dag" and data["run_id"] == "run1" and data["try_number"] == 1
    assert data["evidence"] is None and data["head"] == "c1" and "success" in data["reason"]


def temporary(try_number: int = 1, key: PublicationKey = KEY, metadata: dict[str, str] | None = None) -> StagingBranch:
    """A merge-only replacement's temporary branch, left behind by a worker that died mid-replacement."""
    name = temp_branch_name(staging_branch_name(attempt(try_number, key)))
    branch = inspect_branch(name, "r1", metadata, "lakefence")
    assert branch is not None
    return branch


def test_inspect_recognises_a_merge_only_temporary_branch() -> None:
    name = staging_branch_name(attempt(2))
    # Its HEAD may even carry this attempt's stage record or a marker (the revert's parent): still no evidence.
    branch = temporary(2, metadata=evidence_metadata(attempt(2), INPUT, "PublishFenceError"))
    assert branch.temporary and branch.name == name + "-mo"
    assert branch.info == inspect_branch(name, "c", {}, "lakefence").info  # type: ignore[union-attr]
    assert branch.record is None and branch.evidence is None
    assert not staged().temporary
    for other in (name + "-mox", name + "-mo-mo", "main-mo", name[:-1] + "-mo"):
        assert inspect_branch(other, "c", {}, "lakefence") is None, other


@pytest.mark.parametrize("state", [*STATES, None])
def test_a_temporary_branch_follows_its_attempt_and_is_never_evidence(state: str | None) -> None:
    # Its staged sibling is kept as unmarked evidence unless the TI succeeded; the temporary one is not.
    sibling, temp = staged(1), temporary(1)
    decisions = plan([sibling, temp], states={KEY: state})
    delete, reason = decisions[temp.name]
    assert delete == (state not in LIVE_STATES), reason
    assert reason.startswith("merge-only temporary branch: ")
    assert decisions[sibling.name][0] == (state == "success")


def test_an_unidentified_temporary_branch_waits_for_max_age() -> None:
    temp = temporary(1)
    assert plan([temp]) == {temp.name: (False, "merge-only temporary branch: attempt cannot be identified "
                                        "(unstaged; pass its publisher, or set max_age)")}  # fmt: skip
    delete, _ = plan([temp], first_seen={temp.name: ("r1", 0.0)}, max_age=10.0)[temp.name]
    assert delete
    assert plan([temp], keys={key_hash(KEY): KEY}, states={KEY: "running"})[temp.name][0] is False


# -- a branch that could not be marked is never deleted --------------------------------------------

DEAD = sorted(PENDING_STATES | FAILED_STATES)


@pytest.mark.parametrize("state", [*DEAD, "success", None])
@pytest.mark.parametrize("delete_evidence", [False, True])
def test_an_unstaged_branch_holding_uncommitted_changes_may_be_evidence(
    state: str | None, delete_evidence: bool
) -> None:
    # An OutputPrefixError keeps the branch before anything is committed: its marker is the only
    # commit it would get. Unmarked, it holds the uploads uncommitted, which a crash leftover
    # without output does not.
    branch = unstaged()
    keys = {key_hash(KEY): KEY}
    delete, reason = plan(
        [branch], keys=keys, states={KEY: state}, has_uncommitted=lambda _b: True, delete_evidence=delete_evidence
    )[branch.name]
    # A success whose last try did not record it as evidence proves it is not (a crash leftover).
    assert delete == (delete_evidence or state == "success"), reason
    if not delete:
        assert "uncommitted changes" in reason and "delete_evidence=True" in reason
    # Without uncommitted changes it holds nothing: deleted once its attempt is dead.
    assert plan([branch], keys=keys, states={KEY: state})[branch.name][0] is True


def test_uncommitted_changes_are_asked_only_of_unstaged_branches_about_to_be_deleted() -> None:
    asked: list[str] = []

    def dirty(branch: StagingBranch) -> bool:
        asked.append(branch.name)
        return True

    branches = [unstaged(1), staged(2), staged(3, evidence="PublishFenceError"), unstaged(1, OTHER)]
    keys = {key_hash(KEY): KEY, key_hash(OTHER): OTHER}
    # A live task instance: rule 2 asks about the older unstaged branch (is it only a leftover?).
    plan(branches, keys=keys, states={KEY: "running", OTHER: "running"}, has_uncommitted=dirty)
    assert asked == [branches[0].name]
    asked.clear()
    # A dead one: asked once per unstaged branch, never of a staged or a marked one.
    decisions = plan(branches, keys=keys, states={KEY: "failed", OTHER: "failed"}, has_uncommitted=dirty)
    assert sorted(asked) == sorted([branches[0].name, branches[3].name])
    assert [decisions[b.name][0] for b in branches] == [False, False, False, False]


def test_a_newer_try_never_kills_an_older_unstaged_branch_holding_uncommitted_changes() -> None:
    old, new = unstaged(1), staged(2)
    for state, deleted in (("running", False), ("up_for_retry", False), ("failed", False), ("success", True)):
        delete, reason = plan([old, new], states={KEY: state}, has_uncommitted=lambda b: b is old)[old.name]
        assert delete == deleted, reason


@pytest.mark.parametrize("is_staged", [True, False])
def test_after_a_success_only_the_evidence_its_last_try_recorded_is_kept(is_staged: bool) -> None:
    # The succeeding try read the run's evidence list and reported it (XCom ``evidence``): a branch
    # it names may be unmarked evidence (its re-marking failed); any other possible evidence of a
    # succeeded task instance is a leftover (a kill after staging, a failed delete).
    named, other = (staged(1), staged(2)) if is_staged else (unstaged(1), unstaged(2))
    asked: list[PublicationKey] = []

    def recorded(key: PublicationKey) -> list[str]:
        asked.append(key)
        return [named.name]

    decisions = plan(
        [named, other], states={KEY: "success"}, keys={key_hash(KEY): KEY}, has_uncommitted=lambda _b: True,
        run_evidence=recorded,
    )  # fmt: skip
    assert decisions[named.name][0] is False and "could not be written" in decisions[named.name][1]
    assert decisions[other.name][0] is True
    assert asked == [KEY]  # once per task instance
    # The evidence list could not be read (or a try of an older provider reported none): kept.
    unknown = plan(
        [named, other], states={KEY: "success"}, keys={key_hash(KEY): KEY}, has_uncommitted=lambda _b: True,
        run_evidence=lambda _k: None,
    )  # fmt: skip
    assert not unknown[named.name][0] and not unknown[other.name][0]


def test_unidentified_branch_holding_uncommitted_changes_outlives_max_age() -> None:
    branch = unstaged()
    options = {"keys": {}, "first_seen": {branch.name: (INPUT, 0.0)}, "max_age": 60.0}
    assert plan([branch], **options)[branch.name][0] is True
    delete, reason = plan([branch], has_uncommitted=lambda _b: True, **options)[branch.name]
    assert not delete and "uncommitted changes" in reason


def test_the_defaults_keep_what_they_cannot_check() -> None:
    # Without the lakeFS and Airflow answers, an unstaged branch may hold changes and a success may
    # have recorded evidence: nothing that might be evidence is deleted.
    old, new = unstaged(1), staged(2)
    decisions = plan_cleanup([old, new], keys={}, states={KEY: "success"}, first_seen={}, now=0.0)
    assert [d.delete for d in decisions] == [False, False]
