"""Steps 10 and 11: the publish fence decides, a strategy acts, then verifies what it did.

:class:`Publisher` checks the hard fence before the job (a :class:`~airflow_lakefence.core.fences.hard.HardFenceStatus`
value) and, at publish time, hands the attempt to one of two strategies behind one interface
(:class:`PublishStrategy`):

* :class:`BranchPublish` (the default, ``fence_scope="branch"``) reads the target's HEAD, asks the
  decision table (:func:`~airflow_lakefence.core.fences.publish.decide_publish`) and acts on its one answer:
  merge, no-op, replacement or relocation of an abandoned publication (by a hard reset, or by merges
  on a protected target: :mod:`airflow_lakefence.core.publication.replacement`), idempotent completion, or
  failing closed. After acting it verifies (the merge's first parent, the HEAD after a reset)
  unless lakeFS's hard fence already checked the head server-side (docs/hard-fence.md);
* :class:`~airflow_lakefence.core.publication.scoped_publisher.ScopedPublish` (``fence_scope="prefixes"``) fences
  on the declared prefixes instead.

Both send their merges through :class:`~airflow_lakefence.core.publication.target_merge.TargetMerge` and replace by
merges through :func:`~airflow_lakefence.core.publication.replacement.replace_through_temp_branch`.

lakeFS's answers arrive here already sorted into exception classes by the client adapter; this
module turns each into what it means for the protocol.

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any, NamedTuple, Protocol

from airflow_lakefence import failpoints
from airflow_lakefence.core.advice import fail_closed_message
from airflow_lakefence.core.fences.attempt import AttemptGuard, in_background
from airflow_lakefence.core.fences.hard import (
    ACTION_PATH,
    NO_HARD_FENCE,
    FenceStatus,
    HardFenceStatus,
    check_ref,
    expected_head_metadata,
    fence_vouch_metadata,
)
from airflow_lakefence.core.fences.publish import Action, FenceDecision, HeadState, decide_publish
from airflow_lakefence.core.names.keys import AttemptId
from airflow_lakefence.core.ports import CommitInfo, LakeFSPort
from airflow_lakefence.core.publication.replacement import replace_by_merge, temp_branch_name
from airflow_lakefence.core.publication.scoped_publisher import ScopedPublish
from airflow_lakefence.core.publication.staged import StagedOutput
from airflow_lakefence.core.publication.target_merge import TargetMerge
from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, LakeFenceRecord, encode_metadata
from airflow_lakefence.core.records.reporting import Log
from airflow_lakefence.core.records.run_state import RunStatePort, reported_publication
from airflow_lakefence.core.request import PublishRequest, read_target_head
from airflow_lakefence.exceptions import (
    HardFenceMissingError,
    HardFenceRaceError,
    LakeFenceError,
    LakeFSBranchProtectedError,
    LakeFSHookRejectedError,
    PublishFenceError,
    PublishRaceError,
)

_ACTIONS_DIR = ACTION_PATH.split("/")[0] + "/"


def supersedes(run_state: RunStatePort, head: HeadState, early: FenceDecision) -> dict[str, Any] | None:
    """The successful publication this attempt is about to replace, if HEAD is one.

    An earlier try of this run that reported HEAD as its output and was cleared afterwards (a
    deliberate re-run) is *superseded*, not abandoned.

    :param run_state: the run state (the publication an earlier try reported).
    :param head: the target's HEAD.
    :param early: the fence's decision on it before the job.
    """
    if early.action not in (Action.REPLACE, Action.RELOCATE):
        return None
    reported = reported_publication(run_state)
    if reported is None or reported["output_ref"] != head.commit_id:
        return None
    return {"output_ref": head.commit_id, "try_number": reported.get("try_number")}


class _Publishing(NamedTuple):
    """The values every action of one publish round works with."""

    attempt: AttemptId
    staging: str
    input_commit: str
    staged: str
    hard_fence: HardFenceStatus
    #: the target's HEAD the round decided on
    head: HeadState
    #: the publication's metadata, naming the head the merge expects
    metadata: Mapping[str, str]


@dataclasses.dataclass
class Publisher:
    """Steps 10 and 11 of one attempt, and the hard fence it may rely on.

    :param lakefs: the lakeFS port.
    :param request: the validated request.
    :param guard: the attempt's guard.
    :param log: where to log.
    :param job_name: how messages name the job.
    """

    lakefs: LakeFSPort
    request: PublishRequest
    guard: AttemptGuard
    log: Log
    job_name: str
    merging: TargetMerge = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.merging = TargetMerge(self.lakefs, self.request)

    # -- the hard fence (docs/hard-fence.md) ---------------------------------------------------

    def check_hard_fence(self, input_commit: str, head: HeadState | None = None) -> HardFenceStatus:
        """Before the job: does lakeFS run the hard fence on merges built on the input? (0 or 1 call).

        No call when the target's HEAD, read in step 1, is the input and vouches for its fence (the
        installer's merge, or a publication that kept the fence intact): see
        :func:`~airflow_lakefence.core.fences.hard.vouched_check`.

        :param input_commit: the input commit.
        :param head: the target's HEAD read in step 1, if any.
        :return: the status the publish relies on (narrow it with :meth:`note_written` after the job).
        :raises HardFenceMissingError: with ``hard_fence="require"`` when it does not.
        """
        mode = self.request.hard_fence
        if mode == "off":
            return NO_HARD_FENCE
        known = head is not None and head.commit_id == input_commit
        check = check_ref(
            self.lakefs,
            self.request.repository,
            input_commit,
            metadata=head.metadata if known and head is not None else None,
            first_parent=head.first_parent if known and head is not None else None,
        )
        scoped = self.request.scope is not None
        refusal = check.refusal(scoped=scoped)
        if refusal is not None and mode == "require":
            raise HardFenceMissingError(f"hard_fence='require': {refusal}")
        # A scoped publication relies only on a hook that checks scopes (version 2 or later).
        relied_on = check.scoped if scoped else check.enforced
        # A direct-mode job may rewrite the action file in the staged commit unless output_prefixes
        # keep it out, and a declared prefix inside the actions' directory lets the job (or, with
        # output_mode="replace", the engine itself) change it: then the merge is still verified after
        # acting.
        prefixes = self.request.prefixes
        inside = any(p.startswith(_ACTIONS_DIR) for p in prefixes)
        unknown = self.request.write_mode == "direct" and not prefixes
        untouched = not (inside or unknown)
        intact = relied_on and untouched
        # A publication that keeps the input's actions' directory vouches for what the check found,
        # the fence's version or none at all, so the next attempt built on it needs no read.
        vouch = None
        if untouched:
            vouch = check.installed_version if relied_on else 0 if check.status is FenceStatus.MISSING else None
        self.log.info("Hard fence: %s", check.message)
        return HardFenceStatus(relied_on, intact, check.installed_version, vouch, diff_decides=relied_on and unknown)

    @staticmethod
    def note_written(status: HardFenceStatus, paths: Iterable[str]) -> HardFenceStatus:
        """The status once the job wrote these workspace paths (one under the actions' directory voids it).

        :param status: the status from :meth:`check_hard_fence`.
        :param paths: object paths.
        """
        return status.after_writing(paths, _ACTIONS_DIR)

    # -- steps 10 and 11 -------------------------------------------------------------------------

    def record(self, attempt: AttemptId, input_commit: str, staged: CommitInfo) -> dict[str, str]:
        """The publication's metadata: the user's, and this attempt's ``publish`` record.

        :param attempt: this attempt.
        :param input_commit: the input commit.
        :param staged: the staged commit.
        """
        return {
            **(self.request.commit_metadata or {}),
            **encode_metadata(LakeFenceRecord(attempt, ROLE_PUBLISH, input_commit, staged.id)),
        }

    def strategy(
        self,
        early_head: HeadState,
        superseded: Mapping[str, Any] | None = None,
        hard_fence: HardFenceStatus = NO_HARD_FENCE,
    ) -> PublishStrategy:
        """The strategy that decides on the target and acts: branch-wide, or scoped by prefixes.

        :param early_head: the target's HEAD read before the job (the hard fence acts on it at once).
        :param superseded: the successful publication this attempt replaces, if any.
        :param hard_fence: the hard fence's status (:meth:`check_hard_fence`, :meth:`note_written`).
        """
        if self.request.scope is not None:
            return ScopedPublish(
                self.lakefs, self.request, self.request.scope, self.guard, self.log, self.merging, hard_fence
            )
        return BranchPublish(
            self.lakefs,
            self.request,
            self.guard,
            self.log,
            self.merging,
            hard_fence,
            self.job_name,
            early_head,
            superseded,
        )


class PublishStrategy(Protocol):
    """Steps 10 and 11 for one request: decide on the target and act (branch-wide or scoped)."""

    def read_ahead(self, attempt: AttemptId, input_commit: str) -> None:
        """Before staging: start the reads the decision needs that staging cannot change (or none).

        :param attempt: this attempt.
        :param input_commit: the input commit.
        """
        ...

    def publish(self, output: StagedOutput) -> tuple[FenceDecision, str]:
        """Decide and act; return the decision and the output ref.

        :param output: the attempt's staged output and its publication's record.
        :raises PublishFenceError: (or a subclass) when failing closed; the caller keeps the evidence.
        """
        ...

    def verification(self) -> Future[None] | None:
        """The check of step 11 still in flight after :meth:`publish` returned, if any.

        Its ``result()`` raises :class:`~airflow_lakefence.exceptions.PublishRaceError` when the
        check found a race; the caller waits for it before it reports the publication.
        """
        ...

    def settle(self) -> None:
        """Wait for every read or check still in flight, ignoring their outcomes (an error is being raised)."""
        ...


@dataclasses.dataclass
class BranchPublish:
    """The branch-wide strategy: the decision table on the target's HEAD, acted on (merge, reset or
    merge-only replacement), verified unless lakeFS's hard fence checked it.

    :param lakefs: the lakeFS port.
    :param request: the validated request.
    :param guard: the attempt's guard.
    :param log: where to log.
    :param merging: how merges into the target are sent and their refusals read.
    :param hard_fence: the hard fence's status, as the check before the job left it.
    :param job_name: how messages name the job.
    :param early_head: the target's HEAD read before the job (the hard fence acts on it at once).
    :param superseded: the successful publication this attempt replaces, if any.
    """

    lakefs: LakeFSPort
    request: PublishRequest
    guard: AttemptGuard
    log: Log
    merging: TargetMerge
    hard_fence: HardFenceStatus
    job_name: str
    early_head: HeadState
    superseded: Mapping[str, Any] | None
    #: the publish fence's read of the target, sent beside the staging commit
    _ahead: Future[HeadState] | None = dataclasses.field(default=None, init=False)
    #: the merge's verification, in flight beside the report's writes
    _verifying: Future[None] | None = dataclasses.field(default=None, init=False)

    def read_ahead(self, attempt: AttemptId, input_commit: str) -> None:
        """Start the publish fence's read of the target, to travel beside the staging commit.

        Only where the target's HEAD before the job was the input (a merge was expected) and lakeFS's
        hard fence is not relied on (it needs no read). The decision is still taken after the
        attempt fence's second check, on this read; a writer that moves the target from here to the
        merge is what verifying the merge's first parent reports, as before. A retry that meets an
        earlier try's publication reads the target only after that check: a hard reset, which
        nothing verifies beforehand, acts on the freshest read.

        :param attempt: this attempt.
        :param input_commit: the input commit.
        """
        if self.hard_fence.relied_on:
            return
        early = decide_publish(self.early_head, input_commit, attempt, True, input_commit)
        if early.action is Action.MERGE:
            self._ahead = in_background(read_target_head, self.lakefs, self.request)

    def verification(self) -> Future[None] | None:
        """The merge's verification still in flight, if any (see :class:`PublishStrategy`)."""
        return self._verifying

    def settle(self) -> None:
        """Wait for the read ahead and the verification, if still in flight (see :class:`PublishStrategy`)."""
        _settle(self._ahead)
        _settle(self._verifying)

    def publish(self, output: StagedOutput) -> tuple[FenceDecision, str]:
        """Decide on the target's HEAD and act (see :class:`PublishStrategy`)."""
        return self.guard.write_once("publish", functools.partial(self._round, output), staging=output.staging)

    def _read_head(self, answer_lost: bool) -> HeadState:
        """The target's HEAD: the read sent ahead (first round only), else a fresh read."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and not answer_lost:
            try:
                return ahead.result()
            except LakeFenceError as exc:  # read again below: a lost read decides nothing
                self.log.warning("Reading the target ahead failed (%s): reading it again", exc)
        return read_target_head(self.lakefs, self.request)

    def _round(self, output: StagedOutput, answer_lost: bool) -> tuple[FenceDecision, str]:
        """One publish round: decide on the target's HEAD and act.

        Every round reads the target afresh: a write that landed although its answer was lost shows
        up as this attempt's own publication (the idempotent row). With the hard fence a merge acts
        at once on the head read before the job, and the target is read only when lakeFS refuses it
        (the head moved: e.g. an earlier try's publication to replace).
        """
        attempt, staging, input_commit, staged = output.attempt, output.staging, output.input_commit, output.staged
        changed = staged.id != input_commit
        refused: PublishRaceError | None = None
        if self.hard_fence.relied_on and not answer_lost:
            decision = decide_publish(self.early_head, input_commit, attempt, changed, staged.id)
            optimistic = decision.action is Action.MERGE or (
                decision.action not in (Action.NOOP, Action.FAIL_CLOSED) and self.request.replace_by_merge
            )
            if optimistic:
                try:
                    return self._act(self.early_head, decision, output)
                except PublishRaceError as exc:
                    # Refused by the fence, or a conflict with what moved the head: nothing landed.
                    if not self.merging.nothing_landed(exc):
                        raise
                    self.log.info("%s: reading the target to decide again", exc)
                    refused = exc
        head = self._read_head(answer_lost)
        decision = decide_publish(head, input_commit, attempt, changed, staged.id)
        if refused is not None and decision.action is Action.FAIL_CLOSED:
            # The fence lost the race to a writer the table cannot explain: say both.
            raise HardFenceRaceError(f"{refused}; now: {decision.reason}", staging_branch=staging) from refused
        return self._act(head, decision, output)

    def _act(self, head: HeadState, decision: FenceDecision, output: StagedOutput) -> tuple[FenceDecision, str]:
        """Act on the decision taken on ``head``; return it (with its reason for the log) and the output ref."""
        attempt, staging, input_commit, staged, record = output
        decision = self._explain(head, decision, output)
        failpoints.hit("after_publish_read")
        self.log.info("Publish fence: %s (%s)", decision.action.value, decision.reason)
        # Every lakefence merge names the head it expects: the hard fence's compare-and-swap.
        metadata = {**record, **expected_head_metadata(head.commit_id)}
        pub = _Publishing(attempt, staging, input_commit, staged.id, self.hard_fence, head, metadata)
        if decision.action is Action.FAIL_CLOSED:
            raise PublishFenceError(decision.reason, staging_branch=staging)
        if decision.action is Action.MERGE:
            return decision, self._merge(pub)
        if decision.action in (Action.REPLACE, Action.RELOCATE):
            assert decision.output_ref is not None
            if self.request.replace_by_merge:
                return decision, self._replace_by_merge(pub)
            return decision, self._reset(decision.output_ref, pub)
        if decision.action is Action.IDEMPOTENT:
            # A previous round's write landed although its answer was lost.
            assert decision.output_ref is not None
            return decision, decision.output_ref
        return decision, input_commit  # NOOP

    def _explain(self, head: HeadState, decision: FenceDecision, output: StagedOutput) -> FenceDecision:
        """The decision with a reason for the person reading the log."""
        attempt, staging, input_commit = output.attempt, output.staging, output.input_commit
        superseded = self.superseded
        if decision.action is Action.FAIL_CLOSED:
            # The job ran: only the publication is refused (its output stays as evidence).
            message = fail_closed_message(
                decision.code,
                head,
                input_commit,
                attempt,
                self.request.target_branch,
                before_job=False,
                job_name=self.job_name,
                kept_in=staging,
            )
            return dataclasses.replace(decision, reason=message)
        if (
            decision.action in (Action.REPLACE, Action.RELOCATE)
            and superseded is not None
            and superseded["output_ref"] == head.commit_id
        ):
            # A successful try's publication, cleared on purpose: superseded, not abandoned.
            nothing = " and this try changed nothing" if decision.action is Action.RELOCATE else ""
            return dataclasses.replace(
                decision,
                reason=f"target HEAD {head.commit_id} is the superseded publication of try "
                f"{superseded['try_number']} (it succeeded; the task instance was cleared){nothing}",
            )
        return decision

    def _merge(self, pub: _Publishing) -> str:
        attempt, staging, input_commit, staged, hard_fence, head, metadata = pub
        if hard_fence.vouch is not None:
            # The publication's tree keeps the input's actions' directory: the next attempt that
            # builds on it learns the fence (or that there is none) from its metadata, without a read.
            metadata = {**metadata, **fence_vouch_metadata(hard_fence.vouch)}
        diffing = self._diff_actions_beside(pub)
        try:
            merge_ref = self.merging.send(attempt, staging, staged, metadata, head)
        except BaseException:
            _settle(diffing)
            raise
        failpoints.hit("after_publish_action")
        # Else lakeFS checked the first parent before the branch moved.
        if not (hard_fence.intact or self._actions_kept(diffing)):
            # The check reads what is already written: it travels beside the report's writes, and
            # the output ref is reported only once it passed (see :meth:`verification`).
            self._verifying = in_background(self._verify_merge, merge_ref, input_commit, staging)
        return merge_ref

    def _verify_merge(self, merge_ref: str, input_commit: str, staging: str) -> None:
        """Verify the merge, beside the report's writes; a lost answer asks again (the merge commit
        cannot change), as a publish round whose verifying read was lost did.

        :raises PublishRaceError: when another writer moved the target first.
        :raises LakeFSUnavailableError: when no round got an answer.
        """
        self.guard.write_once(
            "merge verification",
            lambda _lost: self._check_first_parent(merge_ref, input_commit, "the input", staging),
        )

    def _diff_actions_beside(self, pub: _Publishing) -> Future[bool] | None:
        """With :attr:`HardFenceStatus.diff_decides`: start asking whether the staged commit kept the
        input's actions' directory (one diff call, sent beside the merge: no round trip of its own).

        lakeFS loads a merge's hooks from the merged tree: a staged commit that changed the
        directory may have dropped the fence for its own merge. One that kept it merges under the
        input's fence, as a workspace-mode attempt whose job wrote nothing there does, and then the
        merge lakeFS accepted needs no verifying read.
        """
        if not pub.hard_fence.diff_decides or pub.hard_fence.intact:
            return None
        repository = self.request.repository

        def kept() -> bool:
            return not self.lakefs.diff_refs(repository, pub.input_commit, pub.staged, prefix=_ACTIONS_DIR, limit=1)

        return in_background(kept)

    def _actions_kept(self, diffing: Future[bool] | None) -> bool:
        """Whether the diff proved the actions' directory unchanged (no diff, or no answer: not proved)."""
        if diffing is None:
            return False
        try:
            kept = diffing.result()
        except LakeFenceError as exc:
            self.log.warning("Could not diff the actions' directory (%s): the merge is verified", exc)
            return False
        if not kept:
            self.log.info("The staged commit changed %s: the merge is verified", _ACTIONS_DIR)
        return kept

    def _check_first_parent(self, merge_ref: str, expected: str, what: str, staging: str) -> None:
        """Verify a merge after acting: its first parent is what the round built on.

        :raises PublishRaceError: when another writer moved the target first.
        """
        merged = self.lakefs.get_commit(self.request.repository, merge_ref)
        if merged.parents[:1] != (expected,):
            raise PublishRaceError(
                f"merge commit {merge_ref} has first parent {merged.parents[:1]}, not {what} {expected}: "
                f"another writer raced the publish; {self.request.target_branch!r} left as is",
                staging_branch=staging,
            )

    def _reset(self, output_ref: str, pub: _Publishing) -> str:
        staging = pub.staging
        client, repo, target = self.lakefs, self.request.repository, self.request.target_branch
        try:
            client.hard_reset(repo, target, output_ref)
        except LakeFSBranchProtectedError:
            self.log.info("%r is protected (no hard reset): replacing by merges", target)
            return self._replace_by_merge(pub)
        failpoints.hit("after_publish_action")
        now = HeadState.of(client.get_commit(repo, target))
        # A commit whose first parent is what was set came after the reset: not a race.
        if output_ref not in (now.commit_id, now.first_parent):
            raise PublishRaceError(
                f"after resetting {target!r} to {output_ref} its HEAD is {now.commit_id}: another "
                "writer raced the publish; left as is",
                staging_branch=staging,
            )
        return output_ref

    def _replace_by_merge(self, pub: _Publishing) -> str:
        attempt, staging, input_commit, staged, hard_fence, head, metadata = pub
        diffing = self._diff_actions_beside(pub)
        try:
            outcome = replace_by_merge(
                self.lakefs,
                repository=self.request.repository,
                target=self.request.target_branch,
                head=head,
                input_commit=input_commit,
                staged_commit=staged,
                temp_branch=temp_branch_name(staging),
                message=self.request.message(ROLE_PUBLISH, attempt),
                metadata=metadata,
                # A staged tree equal to the replaced publication's still needs its own merge commit.
                send=lambda source, link: self.merging.send(attempt, staging, source, link, head, allow_empty=True),
            )
        except LakeFSHookRejectedError as exc:
            _settle(diffing)
            raise self.merging.rejection(exc, head, staging) from exc
        except BaseException:
            _settle(diffing)
            raise
        failpoints.hit("after_publish_action")
        if outcome.calls and not (hard_fence.intact or self._actions_kept(diffing)):
            self._check_first_parent(outcome.output_ref, head.commit_id, "the replaced publication", staging)
        return outcome.output_ref


def _settle(future: Future[Any] | None) -> None:
    """Wait for a background call whose answer no longer matters (an error is being raised)."""
    if future is None:
        return
    try:
        future.result()
    except BaseException:  # the error already raised is the one reported
        pass
