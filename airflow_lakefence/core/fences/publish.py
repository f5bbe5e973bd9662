"""The publish-fence decision table (protocol step 10).

Given the target branch's HEAD, the input commit, this attempt and whether staging changed
anything, :func:`decide_publish` returns the one action the protocol allows:

* HEAD is the input: **merge** when something changed (output: the merge commit), else **noop**
  (output: the input);
* HEAD's first parent is the input and HEAD records an earlier try of the same key on that input:
  **replace** (hard reset to the staged commit) when something changed, else **relocate** (hard
  reset to the input);
* HEAD records this very attempt on top of the input (a write whose answer was lost):
  **idempotent** (output: HEAD);
* anything else: **fail_closed**.

The function is total and pure: every combination of inputs maps to exactly one row.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow_lakefence.core.fences.hard import is_chain_link
from airflow_lakefence.core.names.keys import AttemptId
from airflow_lakefence.core.records.metadata import decode_metadata

if TYPE_CHECKING:
    from airflow_lakefence.core.ports import CommitInfo

# lakeFS commit version from which a merge's parents are stored [destination, source]; older
# (version 0) commits store them reversed.
PARENT_SWITCH_VERSION = 1


class Action(enum.StrEnum):
    """What the publish step does."""

    MERGE = "merge"
    NOOP = "noop"
    REPLACE = "replace"
    RELOCATE = "relocate"
    IDEMPOTENT = "idempotent"
    FAIL_CLOSED = "fail_closed"


@dataclass(frozen=True)
class HeadState:
    """The target branch's HEAD commit as the fence sees it.

    :param commit_id: the HEAD commit id.
    :param parents: the commit's parents as lakeFS stores them.
    :param metadata: the commit's metadata.
    :param version: the lakeFS commit version (decides the parent order).
    """

    commit_id: str
    parents: tuple[str, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    version: int = PARENT_SWITCH_VERSION

    @classmethod
    def of(cls, commit: CommitInfo) -> HeadState:
        """The fence's view of a commit (the one conversion from :class:`~airflow_lakefence.core.ports.CommitInfo`).

        :param commit: the commit, as a lakeFS port returns it.
        """
        return cls(commit.id, tuple(commit.parents), dict(commit.metadata), commit.version)

    @property
    def first_parent(self) -> str | None:
        """The parent on the target branch's own line of history (the merge destination)."""
        if not self.parents:
            return None
        if self.version < PARENT_SWITCH_VERSION and len(self.parents) > 1:
            return self.parents[-1]
        return self.parents[0]


class Reason(enum.StrEnum):
    """Why the fence decided what it did: one code per row of the decision table.

    The fail-closed codes are as specific as the advice needs (:mod:`airflow_lakefence.core.advice`
    maps each code to a message saying what to do), so nothing downstream decides again.
    """

    HEAD_IS_INPUT = "head_is_input"
    NOTHING_CHANGED = "nothing_changed"
    OWN_PUBLICATION = "own_publication"
    ABANDONED = "abandoned"
    ABANDONED_NOTHING_CHANGED = "abandoned_nothing_changed"
    OTHER_MAPPED_INSTANCE = "other_mapped_instance"
    LATER_RUN = "later_run"
    OTHER_TASK = "other_task"
    OTHER_INPUT = "other_input"
    NOT_EARLIER_TRY = "not_earlier_try"
    FOREIGN_ON_INPUT = "foreign_on_input"
    MOVED = "moved"


@dataclass(frozen=True)
class FenceDecision:
    """The fence's answer.

    :param action: the action to take.
    :param output_ref: the commit the task reports, when known before acting (``None`` for a merge,
        whose commit does not exist yet, and for a failure).
    :param reason: a sentence explaining the decision, for logs and exceptions.
    :param code: the decision table's row (``None`` for a decision made elsewhere, e.g. the scoped fence).
    :param replaces: for a replacement or a relocation, the commit it takes off the target (the
        abandoned or superseded publication), recorded with what the try reports.
    """

    action: Action
    output_ref: str | None
    reason: str
    code: Reason | None = None
    replaces: str | None = field(default=None, compare=False)


def _refusal(head: HeadState, input_ref: str, attempt: AttemptId) -> tuple[Reason, str]:
    """Why a HEAD the table cannot explain is refused: the most specific code, and a sentence."""
    record = decode_metadata(head.metadata)
    mine = attempt.key
    if record is not None:
        key = record.attempt.key
        same_task = (key.dag_id, key.task_id) == (mine.dag_id, mine.task_id)
        published = f"target HEAD {head.commit_id} was published for"
        if same_task and key.run_id == mine.run_id and key.map_index != mine.map_index:
            return Reason.OTHER_MAPPED_INSTANCE, f"{published} another mapped instance {key}"
        if same_task and key.run_id != mine.run_id:
            return Reason.LATER_RUN, f"{published} another run of this task {key}"
        if not same_task:
            return Reason.OTHER_TASK, f"{published} another key {key}"
        if record.input_ref != input_ref:
            return Reason.OTHER_INPUT, f"target HEAD {head.commit_id} records input {record.input_ref}, not {input_ref}"
        if record.attempt.try_number >= attempt.try_number:
            return Reason.NOT_EARLIER_TRY, (
                f"target HEAD {head.commit_id} was published by try {record.attempt.try_number}, "
                f"not earlier than this try {attempt.try_number}"
            )
    if head.first_parent == input_ref and record is None:
        return Reason.FOREIGN_ON_INPUT, (
            f"target HEAD {head.commit_id} is a foreign commit on top of the input commit: no lakefence record"
        )
    return Reason.MOVED, (
        f"target HEAD {head.commit_id} is neither the input commit {input_ref} nor a commit directly on top of "
        f"it (first parent {head.first_parent})"
    )


def decide_publish(
    head: HeadState, input_ref: str, attempt: AttemptId, changed: bool, staged_commit: str
) -> FenceDecision:
    """Decide what publishing may do (protocol step 10).

    :param head: the target branch's HEAD.
    :param input_ref: the input commit id the attempt built on.
    :param attempt: this attempt.
    :param changed: whether the staged commit differs from the input.
    :param staged_commit: the staged commit id (equal to ``input_ref`` when nothing changed).
    :return: the decision with its :class:`Reason`; ``FAIL_CLOSED`` for every state the protocol
        cannot explain.
    """
    if head.commit_id == input_ref:
        if changed:
            return FenceDecision(Action.MERGE, None, "target HEAD is the input commit", Reason.HEAD_IS_INPUT)
        return FenceDecision(
            Action.NOOP, input_ref, "target HEAD is the input commit and nothing changed", Reason.NOTHING_CHANGED
        )
    record = decode_metadata(head.metadata)
    first_parent = head.first_parent
    # A merge-only replacement's HEAD sits on the publication it replaced, and says so (a chain link).
    on_input = first_parent == input_ref or (record is not None and is_chain_link(head.metadata, first_parent))
    if (
        not on_input
        or record is None
        or record.attempt.key != attempt.key
        or record.input_ref != input_ref
        or (record.attempt != attempt and record.attempt.try_number >= attempt.try_number)
    ):
        code, sentence = _refusal(head, input_ref, attempt)
        return FenceDecision(Action.FAIL_CLOSED, None, sentence, code)
    if record.attempt == attempt:
        return FenceDecision(
            Action.IDEMPOTENT, head.commit_id, "target HEAD is this attempt's own publication", Reason.OWN_PUBLICATION
        )
    abandoned = f"target HEAD {head.commit_id} is an abandoned publication of try {record.attempt.try_number}"
    if changed:
        return FenceDecision(Action.REPLACE, staged_commit, abandoned, Reason.ABANDONED, head.commit_id)
    return FenceDecision(
        Action.RELOCATE,
        input_ref,
        f"{abandoned} and this try changed nothing",
        Reason.ABANDONED_NOTHING_CHANGED,
        head.commit_id,
    )
