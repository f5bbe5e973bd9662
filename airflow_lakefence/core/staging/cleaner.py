"""Which staging branches may be deleted (the staging cleaner), and the evidence marker.

A staging branch outlives its attempt when the worker died (no ``finally`` ran), when a delete
failed, or on purpose: the attempt keeps it as evidence of a fail-closed publish. The cleaner
deletes a branch only when its attempt is **provably dead** and the branch provably holds no
evidence; never a live attempt's branch, never an evidence branch unless asked. The rules, in order:

1. **Evidence**: the branch's HEAD carries the evidence marker (:data:`EVIDENCE_KEY`, written by the
   attempt when it keeps the branch) → keep, unless ``delete_evidence``; then the rules below.
2. **A newer try exists**: another staging branch of the same publication key has a higher try
   number → delete, unless the branch *may be evidence* (rule 6 decides those).
3. **Identify the attempt's task instance**: from the branch HEAD's ``stage`` record (when it
   belongs to this very branch: the name derived from the record must be the branch's name), else
   from the key hash in the name, matched against the keys of staged siblings and of the publishers
   the cleaner was told about.
4. **Unidentified** (an unstaged branch of an unknown key): keep, unless ``max_age`` is set and the
   cleaner has seen the branch at the same HEAD for at least ``max_age`` (its own memory of earlier
   runs) and it may not be evidence (rule 6). The HEAD commit's date says nothing about the branch's
   age: an unstaged branch points at its input commit, which may be much older than the branch.
5. **Ask Airflow** about the task instance: running, deferred or up for reschedule → keep (it may be
   this attempt); a state this version does not know → keep (treated as alive); not found (its run
   was deleted), success, failed, cleared, queued for a retry... → no try is running, so this
   attempt is dead: delete, unless rule 6 keeps it.
6. **May be evidence**: a fail-closed attempt whose marker commit could not be written leaves a
   branch that looks like a crash leftover: *staged but unmarked* (HEAD is the attempt's own
   ``stage`` commit, no marker: refused at publish time) or *unstaged with uncommitted changes*
   (refused before staging, ``OutputPrefixError``: its uploads were never committed; one diff call
   with ``amount=1`` tells, asked only of an unstaged branch the rules would otherwise delete). Such
   a branch is kept unless ``delete_evidence``, or its task instance **succeeded** and the evidence
   list its last try reported (XCom ``evidence``: every branch the run recorded as evidence, marked
   or not) does not name it: then it is a leftover (a kill after staging, a failed delete). An
   unknown or unreadable list keeps it. An unstaged branch without uncommitted changes holds
   nothing of value → delete.

A merge-only replacement's temporary branch (the staging branch's name plus ``-mo``, left behind
when the worker died mid-replacement) belongs to the same attempt and follows the same rules, except
that it is never evidence: it holds only a revert and a merge made from commits that still exist.

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.names.staging_names import (
    StagingBranchInfo,
    key_hash,
    parse_staging_branch_name,
    staging_branch_name,
)
from airflow_lakefence.core.publication.abandonment import FAILED_STATES, LIVE_STATES, PENDING_STATES, SUCCESS
from airflow_lakefence.core.publication.replacement import TEMP_SUFFIX
from airflow_lakefence.core.records.metadata import (
    METADATA_PREFIX,
    ROLE_STAGE,
    LakeFenceRecord,
    decode_metadata,
    encode_metadata,
    output_prefixes_of,
)

#: Commit-metadata key marking a staging branch kept as evidence; the value names the error class.
EVIDENCE_KEY = METADATA_PREFIX + "evidence"
_MAX_ERROR_NAME = 64
#: States in which no try of the task instance is running (anything else counts as alive).
DEAD_STATES = frozenset({SUCCESS}) | PENDING_STATES | FAILED_STATES


def evidence_metadata(attempt: AttemptId, input_ref: str, error: str) -> dict[str, str]:
    """Metadata of the marker commit the operator adds to a staging branch it keeps as evidence.

    The marker carries the attempt's full ``stage`` record, so the cleaner can tell whose evidence
    it is, plus :data:`EVIDENCE_KEY` naming the error (a class name; never a message, which could
    quote anything).

    :param attempt: the attempt that kept the branch.
    :param input_ref: its input commit id.
    :param error: the error class name, e.g. ``PublishFenceError``.
    :raises ValueError: if ``error`` is empty.
    """
    if not error:
        raise ValueError("the evidence marker needs the error's class name")
    record = LakeFenceRecord(attempt, ROLE_STAGE, input_ref)
    return {**encode_metadata(record), EVIDENCE_KEY: error[:_MAX_ERROR_NAME]}


def evidence_of(metadata: Mapping[str, str] | None) -> str | None:
    """The error an evidence marker names, or ``None`` for a commit that is no marker.

    :param metadata: a commit's metadata.
    """
    value = (metadata or {}).get(EVIDENCE_KEY)
    return value or None


@dataclass(frozen=True)
class StagingBranch:
    """A staging branch as the cleaner sees it.

    :param name: the branch name.
    :param head: its HEAD commit id.
    :param info: what the name tells (key hash, try number, ti hash).
    :param record: HEAD's ``stage`` record when it was written by this branch's attempt, else ``None``
        (an unstaged branch points at its input commit, whose record, if any, is someone else's).
    :param evidence: the error named by an evidence marker on HEAD, if any.
    :param temporary: a merge-only replacement's temporary branch of the attempt (never evidence).
    :param output_prefixes: a scoped attempt's write set, as its staged commit or evidence marker names it.
    """

    name: str
    head: str
    info: StagingBranchInfo
    record: LakeFenceRecord | None = None
    evidence: str | None = None
    temporary: bool = False
    output_prefixes: tuple[str, ...] = ()


def inspect_branch(name: str, head: str, metadata: Mapping[str, str] | None, prefix: str) -> StagingBranch | None:
    """Build the cleaner's view of one branch from its name and HEAD.

    :param name: the branch name.
    :param head: its HEAD commit id.
    :param metadata: the HEAD commit's metadata.
    :param prefix: the staging branch prefix.
    :return: the view, or ``None`` when ``name`` is neither a staging branch of ``prefix`` nor the
        temporary branch of one.
    """
    info = parse_staging_branch_name(name, prefix)
    if info is None:
        base = name.removesuffix(TEMP_SUFFIX)
        info = parse_staging_branch_name(base, prefix) if base != name else None
        # Its HEAD is a revert or a merge of the replacement, never a stage record or a marker.
        return None if info is None else StagingBranch(name, head, info, temporary=True)
    record = decode_metadata(metadata)
    if record is None or record.role != ROLE_STAGE or staging_branch_name(record.attempt, prefix) != name:
        return StagingBranch(name, head, info)
    return StagingBranch(name, head, info, record, evidence_of(metadata), output_prefixes=output_prefixes_of(metadata))


def known_keys(
    branches: Iterable[StagingBranch], candidates: Iterable[PublicationKey] = ()
) -> dict[str, PublicationKey]:
    """Map key hashes to publication keys, from staged branches' records and candidate keys.

    :param branches: the inspected branches.
    :param candidates: keys the cleaner can enumerate (the runs of the publishers it was told about).
    """
    keys = {key_hash(key): key for key in candidates}
    keys.update((b.info.key_hash, b.record.attempt.key) for b in branches if b.record is not None)
    return keys


@dataclass(frozen=True)
class CleanupDecision:
    """What the cleaner does with one branch, and why.

    :param branch: the branch name.
    :param delete: whether to delete it.
    :param reason: one sentence.
    :param key: the publication key, when identified.
    :param try_number: the try number from the name.
    :param evidence: the error an evidence marker names, if any.
    :param head: the branch's HEAD commit id.
    :param output_prefixes: a scoped attempt's write set (empty when unknown or branch-wide).
    """

    branch: str
    delete: bool
    reason: str
    key: PublicationKey | None
    try_number: int
    evidence: str | None
    head: str
    output_prefixes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable description."""
        result: dict[str, Any] = {
            "branch": self.branch,
            "reason": self.reason,
            "try_number": self.try_number,
            "evidence": self.evidence,
            "head": self.head,
        }
        if self.key is not None:
            result.update(
                dag_id=self.key.dag_id, run_id=self.key.run_id, task_id=self.key.task_id, map_index=self.key.map_index
            )
        if self.output_prefixes:
            result["output_prefixes"] = list(self.output_prefixes)
        return result


def plan_cleanup(
    branches: Sequence[StagingBranch],
    *,
    keys: Mapping[str, PublicationKey],
    states: Mapping[PublicationKey, str | None],
    first_seen: Mapping[str, tuple[str, float]],
    now: float,
    max_age: float | None = None,
    delete_evidence: bool = False,
    has_uncommitted: Callable[[StagingBranch], bool] | None = None,
    run_evidence: Callable[[PublicationKey], Collection[str] | None] | None = None,
) -> list[CleanupDecision]:
    """Decide, for every staging branch, whether to delete it (the rules in the module docstring).

    :param branches: the inspected staging branches.
    :param keys: key hash → publication key (:func:`known_keys`).
    :param states: publication key → its task instance's normalised state, ``None`` when Airflow
        has no such task instance. A key missing from the mapping was not looked up: its branches
        are kept.
    :param first_seen: branch name → (HEAD, epoch seconds) when an earlier cleaner run first saw it
        at that HEAD.
    :param now: the current time, epoch seconds.
    :param max_age: seconds after which an unidentified branch, unchanged since first seen, is
        deleted; ``None`` never deletes unidentified branches.
    :param delete_evidence: also consider evidence branches for deletion.
    :param has_uncommitted: whether an unstaged branch holds uncommitted changes (one lakeFS call),
        asked only of an unstaged branch the rules would otherwise delete; ``None``: assumed so.
    :param run_evidence: the branches a task instance's last try reported as the run's evidence
        (XCom ``evidence``), ``None`` when unknown; asked at most once per key, only for a succeeded
        task instance with a branch that may be evidence; ``None``: always unknown.
    :return: one decision per branch, in the order given.
    """
    plan = CleanupPlan(branches, keys, states, first_seen, now, max_age, delete_evidence, has_uncommitted, run_evidence)
    return [plan.decision(branch) for branch in branches]


@dataclass
class CleanupPlan:
    """The cleaner's rules over one inspection (the arguments of :func:`plan_cleanup`), asking lakeFS
    and Airflow at most once per branch and per key."""

    branches: Sequence[StagingBranch]
    keys: Mapping[str, PublicationKey]
    states: Mapping[PublicationKey, str | None]
    first_seen: Mapping[str, tuple[str, float]]
    now: float
    max_age: float | None = None
    delete_evidence: bool = False
    has_uncommitted: Callable[[StagingBranch], bool] | None = None
    run_evidence: Callable[[PublicationKey], Collection[str] | None] | None = None
    #: key hash -> the newest try number among the branches
    newest: dict[str, int] = field(init=False, default_factory=dict)
    _dirty: dict[str, bool] = field(init=False, default_factory=dict)
    _reported: dict[PublicationKey, Collection[str] | None] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        for branch in self.branches:
            self.newest[branch.info.key_hash] = max(self.newest.get(branch.info.key_hash, 0), branch.info.try_number)

    def decision(self, branch: StagingBranch) -> CleanupDecision:
        """The decision about one branch."""
        delete, reason, key = self.decide(branch)
        if branch.temporary:
            reason = f"merge-only temporary branch: {reason}"
        return CleanupDecision(
            branch.name,
            delete,
            reason,
            key,
            branch.info.try_number,
            branch.evidence,
            branch.head,
            branch.output_prefixes,
        )

    def unstaged_with_changes(self, branch: StagingBranch) -> bool:
        """Whether an unstaged branch holds uncommitted changes (asked of lakeFS once per branch)."""
        if branch.name not in self._dirty:
            self._dirty[branch.name] = True if self.has_uncommitted is None else self.has_uncommitted(branch)
        return self._dirty[branch.name]

    def may_be_evidence(self, branch: StagingBranch) -> str | None:
        """What makes the branch look like evidence whose marker could not be written, if anything."""
        if self.delete_evidence or branch.temporary or branch.evidence is not None:
            return None
        if branch.record is not None:
            return "staged but not marked"
        return "unstaged with uncommitted changes, not marked" if self.unstaged_with_changes(branch) else None

    def recorded_by_last_try(self, key: PublicationKey) -> Collection[str] | None:
        """The evidence branches the key's last try reported (asked of Airflow once per key)."""
        if key not in self._reported:
            self._reported[key] = None if self.run_evidence is None else self.run_evidence(key)
        return self._reported[key]

    def decide(self, branch: StagingBranch) -> tuple[bool, str, PublicationKey | None]:
        """Whether to delete ``branch``, why, and the publication key it belongs to (if known)."""
        key = branch.record.attempt.key if branch.record is not None else self.keys.get(branch.info.key_hash)
        if branch.evidence is not None and not self.delete_evidence:
            return False, f"kept as evidence of {branch.evidence}", key
        newer = self.newest[branch.info.key_hash]
        if newer > branch.info.try_number and not self.may_be_evidence(branch):
            return True, f"try {newer} of the same task instance exists", key
        if key is None:
            seen = self.first_seen.get(branch.name)
            if (
                self.max_age is not None
                and seen is not None
                and seen[0] == branch.head
                and self.now - seen[1] >= self.max_age
            ):
                looks = self.may_be_evidence(branch)
                if looks:
                    return (
                        False,
                        f"attempt unidentified, {looks}: it may be the evidence of a fail-closed try whose "
                        "marker could not be written (pass its publisher; delete_evidence=True deletes it)",
                        key,
                    )
                return (
                    True,
                    f"attempt unidentified and unchanged for {self.now - seen[1]:.0f}s (max_age {self.max_age:.0f}s)",
                    key,
                )
            return False, "attempt cannot be identified (unstaged; pass its publisher, or set max_age)", key
        if key not in self.states:
            return False, "its task instance's state was not looked up", key
        state = self.states[key]
        if state in LIVE_STATES:
            return False, f"its task instance is {state}: the attempt may be live", key
        if state is not None and state not in DEAD_STATES:
            return False, f"its task instance is in state {state!r}, unknown here: treated as alive", key
        dead = "its task instance no longer exists" if state is None else f"its task instance is {state}"
        looks = self.may_be_evidence(branch)
        if not looks:
            return True, dead if state is None else f"{dead}: no try of it is running", key
        if state == SUCCESS:
            recorded = self.recorded_by_last_try(key)
            if recorded is not None and branch.name not in recorded:
                return True, f"{looks}, but {dead} and its last try recorded no such evidence: a leftover", key
            if recorded is not None:
                return (
                    False,
                    f"{looks}, and {dead}, but its last try recorded it as evidence: a fail-closed try's branch "
                    "whose marker could not be written (delete_evidence=True deletes it)",
                    key,
                )
            return (
                False,
                f"{looks}, and {dead}, but the evidence its last try recorded (XCom evidence) is unknown: it "
                "may be the evidence of a fail-closed try whose marker could not be written "
                "(delete_evidence=True deletes it)",
                key,
            )
        return (
            False,
            f"{looks}, and {dead}: it may be the evidence of a fail-closed try whose marker could not be "
            "written (delete_evidence=True deletes it)",
            key,
        )


def remember(
    branches: Sequence[StagingBranch],
    decisions: Sequence[CleanupDecision],
    previous: Mapping[str, tuple[str, float]],
    now: float,
) -> dict[str, tuple[str, float]]:
    """The first-seen memory to hand to the next run: every kept branch, with when it was first
    seen at its current HEAD (a moved HEAD restarts the clock).

    :param branches: the inspected branches.
    :param decisions: this run's decisions (same order).
    :param previous: the previous run's memory.
    :param now: the current time, epoch seconds.
    """
    memory: dict[str, tuple[str, float]] = {}
    for branch, decision in zip(branches, decisions, strict=True):
        if decision.delete:
            continue
        seen = previous.get(branch.name)
        memory[branch.name] = seen if seen is not None and seen[0] == branch.head else (branch.head, now)
    return memory
