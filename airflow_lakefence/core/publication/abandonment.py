"""Is the target branch's HEAD an abandoned publication? (the soft fence's one crash window)

A worker that dies after publishing and before Airflow records success leaves data on the target
that no successful try stands behind. This module decides, from plain values, what the HEAD of a
branch is:

=====================  ===========================================================================
verdict                HEAD is...
=====================  ===========================================================================
``not_a_publication``  a commit without a lakefence record (a foreign commit, the initial commit)
``out_of_scope``       a publication of another DAG/task than the one asked about
``settled``            a publication whose task instance **succeeded with that output**
                       (its XCom ``output_ref`` is HEAD)
``in_flight``          a publication whose task instance is still running: the try that published
                       it completing, or a newer try that has not shown itself yet
``superseded``         a publication of a try that **succeeded** and was then cleared on purpose (a
                       day re-run): a new try is about to replace it, or is replacing it now
``abandoned``          a publication whose try is neither running nor succeeded with that output:
                       the task instance failed, was marked, cleared, is waiting for a retry, was
                       deleted, succeeded with another output, or a newer try is running
=====================  ===========================================================================

A cleared task instance keeps its ``output_ref`` XCom until its new try starts, so a pending state
with ``output_ref`` equal to HEAD is a cleared success (``superseded``); once the new try runs, it
pushes the XCom ``supersedes`` (``{"output_ref", "try_number"}``) naming the publication it replaces.

Airflow tells a task instance's *current* state but not its try number. The running try is known to
be newer than HEAD's when a staging branch of a higher try of the same key exists (try numbers only
grow, and every writable try creates its staging branch before its job), so a running state is
``abandoned`` (with ``replacement_running``) only with that proof, and ``in_flight`` otherwise.

**Scoped publishers** (``fence_scope="prefixes"``) share the branch with other writers: HEAD may be
another writer's publication stacked on top of theirs. Given a write set (``output_prefixes``), the
question is asked of *the latest publication touching the write set* instead of HEAD: the newest
non-merge commit that changed a path under it (lakeFS's ``log`` with ``prefixes``, one call whatever
the history depth and however many other writers' commits lie on top). A publication shows there as
its staged commit (or, for a replacement or a relocation, its revert commit), which carries the attempt's ``stage``
record; the task instance's ``output_ref`` stands behind it when that commit's ``publish`` record
names the same attempt (:attr:`PublisherState.output_matches`).

Nothing here imports Airflow or lakeFS; the sensors and the trigger gather the inputs and act on
the answer. Airflow task-instance states are plain strings here.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_lakefence.core.fences.publish import HeadState
from airflow_lakefence.core.names.keys import PublicationKey
from airflow_lakefence.core.names.staging_names import parse_staging_branch_name, staging_branch_prefix
from airflow_lakefence.core.records.metadata import LakeFenceRecord, decode_metadata

SUCCESS = "success"
#: States in which a try of the task may still act (a try that publishes never defers, but the
#: decision stays safe for a subclass that does).
LIVE_STATES = frozenset({"running", "deferred", "up_for_reschedule"})
#: States in which no try is running and Airflow will start a new one (retry, clear, rerun).
PENDING_STATES = frozenset({"none", "scheduled", "queued", "up_for_retry", "restarting"})
#: Final states other than success.
FAILED_STATES = frozenset({"failed", "upstream_failed", "skipped", "removed"})


class Verdict(enum.StrEnum):
    """What the target's HEAD is."""

    NOT_A_PUBLICATION = "not_a_publication"
    OUT_OF_SCOPE = "out_of_scope"
    SETTLED = "settled"
    IN_FLIGHT = "in_flight"
    SUPERSEDED = "superseded"
    ABANDONED = "abandoned"


#: Verdicts under which a downstream reader may read HEAD (settled mode passes).
READABLE = frozenset({Verdict.NOT_A_PUBLICATION, Verdict.OUT_OF_SCOPE, Verdict.SETTLED})

DETECT = "detect"
SETTLED_CONDITION = "settled"
#: What a sensor waits for: ``detect`` an abandoned publication, or HEAD ``settled`` for readers.
CONDITIONS = (DETECT, SETTLED_CONDITION)


@dataclass(frozen=True)
class PublisherScope:
    """Restrict the question to the publications of one DAG (and optionally one task).

    :param dag_id: the publishing DAG id, ``None`` for any.
    :param task_id: the publishing task id, ``None`` for any task of the DAG.
    """

    dag_id: str | None = None
    task_id: str | None = None

    def __post_init__(self) -> None:
        if self.task_id is not None and self.dag_id is None:
            raise ValueError("a publisher task_id needs its dag_id")

    def covers(self, key: PublicationKey) -> bool:
        """Tell whether ``key`` is a publication of this scope.

        :param key: the publication key of a commit.
        """
        if self.dag_id is not None and key.dag_id != self.dag_id:
            return False
        return self.task_id is None or key.task_id == self.task_id


@dataclass(frozen=True)
class PublisherState:
    """What Airflow (and the staging branches) say about the task instance that published HEAD.

    :param state: the task instance's current state (``"none"`` for a cleared one without state),
        or ``None`` when the task instance does not exist (its run was deleted).
    :param output_ref: its XCom ``output_ref``; read only when the state is ``success``.
    :param newest_staging_try: the highest try number among the key's staging branches; looked up
        only when the state is live (``None``: not looked up, or no branch).
    :param supersedes: the running try's XCom ``supersedes`` (``{"output_ref", "try_number"}``): the
        successful publication it replaces; read only when a newer try is running.
    :param output_matches: whether ``output_ref`` stands behind the judged commit; ``None``: it does
        when it *is* the judged commit (the branch-wide question, where the judged commit is HEAD).
        The scoped question judges a staged commit, which no ``output_ref`` equals: the caller tells
        (:func:`output_stands_behind`).
    """

    state: str | None
    output_ref: str | None = None
    newest_staging_try: int | None = None
    supersedes: Mapping[str, Any] | None = None
    output_matches: bool | None = None


@dataclass(frozen=True)
class Judgement:
    """The answer about one HEAD.

    :param verdict: what HEAD is.
    :param reason: one sentence, for logs and alerts.
    :param head: HEAD's commit id.
    :param record: HEAD's lakefence record, if any.
    :param state: the publishing task instance's state as observed (``None`` if not asked).
    :param output_ref: the task instance's ``output_ref`` XCom as observed.
    :param retry_pending: an abandoned HEAD that Airflow is about to retry or rerun (the next try
        replaces it, or relocates the target to the input).
    :param replacement_running: an abandoned HEAD whose replacement try is running now.
    :param output_prefixes: the watched write set of a scoped question (empty: HEAD was judged);
        then ``head`` is the newest commit that changed a path under it (``None``: none did).
    :param publication: the publication (merge) commit standing for the judged one, when known:
        HEAD itself in the branch-wide question; in the scoped one the ``output_ref`` that stands
        behind the judged staged commit, ``None`` when no successful try stands behind it.
    """

    verdict: Verdict
    reason: str
    head: str | None
    record: LakeFenceRecord | None = None
    state: str | None = None
    output_ref: str | None = None
    retry_pending: bool = False
    replacement_running: bool = False
    output_prefixes: tuple[str, ...] = ()
    publication: str | None = None

    @property
    def readable(self) -> bool:
        """Whether a downstream reader may read HEAD now (settled mode passes)."""
        return self.verdict in READABLE

    @property
    def repair_underway(self) -> bool:
        """Whether Airflow itself is about to replace an abandoned HEAD (retry pending or running)."""
        return self.retry_pending or self.replacement_running

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable description (for XCom, trigger events and alerts)."""
        result: dict[str, Any] = {
            "verdict": self.verdict.value,
            "reason": self.reason,
            "head": self.head,
            "state": self.state,
            "output_ref": self.output_ref,
            "retry_pending": self.retry_pending,
            "replacement_running": self.replacement_running,
            "publication": self.publication,
        }
        if self.output_prefixes:
            result["output_prefixes"] = list(self.output_prefixes)
        if self.record is not None:
            key = self.record.attempt.key
            result.update(
                dag_id=key.dag_id,
                run_id=key.run_id,
                task_id=key.task_id,
                map_index=key.map_index,
                try_number=self.record.attempt.try_number,
                ti_id=self.record.attempt.ti_id,
                role=self.record.role,
                input_ref=self.record.input_ref,
            )
        return result


def describe_judged(commit_id: str, output_prefixes: tuple[str, ...] = ()) -> str:
    """How messages name the judged commit: HEAD, or the latest commit under the write set.

    :param commit_id: the judged commit.
    :param output_prefixes: the watched write set (scoped), empty for HEAD.
    """
    if not output_prefixes:
        return f"HEAD {commit_id}"
    return f"the latest commit under {', '.join(output_prefixes)} ({commit_id})"


def nothing_written(output_prefixes: tuple[str, ...]) -> Judgement:
    """The scoped verdict when no commit on the branch ever changed the write set.

    :param output_prefixes: the watched write set.
    """
    return Judgement(
        Verdict.NOT_A_PUBLICATION,
        f"no commit on the branch changed a path under {', '.join(output_prefixes)}",
        None,
        output_prefixes=output_prefixes,
    )


def publication_of(
    head: HeadState, scope: PublisherScope | None = None, output_prefixes: tuple[str, ...] = ()
) -> Judgement | LakeFenceRecord:
    """First step: the judged commit's record, or the final verdict when Airflow need not be asked.

    :param head: the target branch's HEAD; or, with ``output_prefixes``, the newest commit that
        changed the write set.
    :param scope: restrict to one publisher; ``None`` for any.
    :param output_prefixes: the watched write set (scoped publishers), empty to judge HEAD.
    :return: the record to look up in Airflow, or a ``not_a_publication`` / ``out_of_scope`` judgement.
    """
    what = describe_judged(head.commit_id, output_prefixes)
    record = decode_metadata(head.metadata)
    if record is None:
        return Judgement(
            Verdict.NOT_A_PUBLICATION,
            f"{what} carries no lakefence record",
            head.commit_id,
            output_prefixes=output_prefixes,
        )
    if scope is not None and not scope.covers(record.attempt.key):
        return Judgement(
            Verdict.OUT_OF_SCOPE,
            f"{what} was published by {record.attempt.key.dag_id}.{record.attempt.key.task_id}, "
            "outside the watched publisher",
            head.commit_id,
            record,
            output_prefixes=output_prefixes,
        )
    return record


def output_stands_behind(judged: LakeFenceRecord, output: Mapping[str, str] | None) -> bool:
    """Whether a task instance's ``output_ref`` commit stands behind a scoped judged commit.

    The judged commit is a staged (or, for a replacement or a relocation, revert) commit carrying an attempt's
    ``stage`` record; the ``output_ref`` is a merge commit carrying a ``publish`` record. They are
    one publication when both name the same attempt (one attempt publishes once).

    :param judged: the judged commit's record.
    :param output: the ``output_ref`` commit's metadata.
    """
    record = decode_metadata(output)
    return record is not None and record.attempt == judged.attempt


def needs_output_ref(state: str | None) -> bool:
    """Whether the ``output_ref`` XCom must be read to judge: for a successful instance, and for a
    pending one (a cleared success keeps its ``output_ref`` until the new try starts).

    :param state: the normalised state.
    """
    return state == SUCCESS or state in PENDING_STATES


def needs_supersedes(state: str | None, record: LakeFenceRecord, newest_staging_try: int | None) -> bool:
    """Whether the running try's ``supersedes`` XCom must be read (only when a newer try runs).

    :param state: the normalised state.
    :param record: HEAD's record.
    :param newest_staging_try: the highest try among the key's staging branches.
    """
    return state in LIVE_STATES and newest_staging_try is not None and newest_staging_try > record.attempt.try_number


def needs_staging_listing(state: str | None) -> bool:
    """Whether the key's staging branches must be listed to judge (only for a live instance).

    :param state: the normalised state.
    """
    return state in LIVE_STATES


def newest_try(branch_names: Iterable[str], key: PublicationKey, prefix: str) -> int | None:
    """The highest try number among the staging branches of ``key`` in ``branch_names``.

    :param branch_names: branch names, e.g. a prefix listing.
    :param key: the publication key.
    :param prefix: the staging branch prefix the publisher uses.
    """
    own = staging_branch_prefix(key, prefix)
    tries = [
        info.try_number
        for name in branch_names
        if name.startswith(own) and (info := parse_staging_branch_name(name, prefix)) is not None
    ]
    return max(tries, default=None)


def judge(
    head: HeadState, record: LakeFenceRecord, publisher: PublisherState, output_prefixes: tuple[str, ...] = ()
) -> Judgement:
    """Second step: judge a publication from its task instance's state.

    :param head: the target branch's HEAD; or, with ``output_prefixes``, the newest commit that
        changed the write set.
    :param record: its lakefence record (from :func:`publication_of`).
    :param publisher: what Airflow says about the publishing task instance.
    :param output_prefixes: the watched write set (scoped publishers), empty to judge HEAD.
    :return: ``settled``, ``in_flight``, ``superseded`` or ``abandoned``.
    """
    key, try_number = record.attempt.key, record.attempt.try_number
    who = f"{key.dag_id}.{key.task_id}[{key.run_id}" + (f", map {key.map_index}]" if key.map_index >= 0 else "]")
    what = f"{describe_judged(head.commit_id, output_prefixes)} (published by {who} try {try_number})"
    matches = (
        publisher.output_ref == head.commit_id if publisher.output_matches is None else publisher.output_matches
    )
    # The publication commit standing for the judged one: HEAD itself, or (scoped) the output_ref
    # of the try that stands behind it.
    publication = head.commit_id if not output_prefixes else (publisher.output_ref if matches else None)

    def verdict(v: Verdict, reason: str, **flags: bool) -> Judgement:
        return Judgement(
            v,
            f"{what}: {reason}",
            head.commit_id,
            record,
            publisher.state,
            publisher.output_ref,
            output_prefixes=output_prefixes,
            publication=publication,
            **flags,
        )

    def superseded_by(supersedes: Mapping[str, Any]) -> bool:
        if not output_prefixes:
            return supersedes.get("output_ref") == head.commit_id
        # Scoped: the replaced publication is named by its try (same key), not by the judged commit.
        return supersedes.get("output_ref") is not None and supersedes.get("try_number") == try_number

    state = publisher.state
    if state is None:
        return verdict(Verdict.ABANDONED, "its task instance no longer exists")
    if state == SUCCESS:
        if matches:
            return verdict(Verdict.SETTLED, "its task instance succeeded with this output")
        return verdict(
            Verdict.ABANDONED,
            f"its task instance is success but stands behind {publisher.output_ref!r}, not this publication",
        )
    if state in LIVE_STATES:
        newest = publisher.newest_staging_try
        supersedes = publisher.supersedes or {}
        if newest is not None and newest > try_number and superseded_by(supersedes):
            return verdict(
                Verdict.SUPERSEDED,
                f"it succeeded and was cleared; try {newest} of its task is {state} and replaces it on purpose",
            )
        if newest is not None and newest > try_number:
            return verdict(
                Verdict.ABANDONED,
                f"try {newest} of its task is {state} and will replace it",
                replacement_running=True,
            )
        return verdict(Verdict.IN_FLIGHT, f"its task instance is {state}: the publishing try may still complete")
    if state in PENDING_STATES and publisher.output_ref is not None and matches:
        return verdict(
            Verdict.SUPERSEDED,
            f"it succeeded with this output and was cleared ({state}): a new try will replace it on purpose",
        )
    if state in PENDING_STATES:
        return verdict(
            Verdict.ABANDONED,
            f"its task instance is {state}: no try is running; the next try will replace it",
            retry_pending=True,
        )
    if state in FAILED_STATES:
        return verdict(Verdict.ABANDONED, f"its task instance is {state}")
    # A state this version does not know (a newer Airflow's): never raise a false alarm on it.
    return verdict(Verdict.IN_FLIGHT, f"its task instance is in state {state!r}, which is not judged here")


def condition_met(condition: str, judgement: Judgement, ignore_repairs_underway: bool = False) -> bool:
    """Whether a judgement satisfies a sensor's condition.

    :param condition: ``detect`` (HEAD is abandoned) or ``settled`` (HEAD may be read).
    :param judgement: the judgement of HEAD.
    :param ignore_repairs_underway: in ``detect``, an abandoned HEAD that Airflow is already
        retrying (retry pending, or a newer try running) does not count.
    :raises ValueError: for an unknown condition.
    """
    if condition == SETTLED_CONDITION:
        return judgement.readable
    if condition != DETECT:
        raise ValueError(f"condition must be one of {CONDITIONS}, got {condition!r}")
    if judgement.verdict is not Verdict.ABANDONED:
        return False
    return not (ignore_repairs_underway and judgement.repair_underway)
