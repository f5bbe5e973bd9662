"""Steps 10 and 11 in the scoped mode: the publish fence on the declared prefixes, not the whole branch.

The pure decisions live in :mod:`airflow_lakefence.core.fences.scope`; this module asks lakeFS the questions
they name and acts on the answers, through the same :class:`~airflow_lakefence.core.publication.publisher.Publisher`
(its merge and the translation of lakeFS's refusals):

* the target's HEAD *H* is the input *I*: merge (or no-op), as in the branch-wide mode;
* otherwise one diff per fenced prefix between *I* and *H* (:class:`~airflow_lakefence.core.fences.scope.ScopeScan`):
  the scope untouched → merge the staged commit onto *H* (lakeFS's three-way merge of disjoint
  changes), or no-op; the read set touched → fail closed, naming the commit (one ``log`` call); only
  the write set touched → read the commits that changed it (one ``log`` call) and
  :func:`~airflow_lakefence.core.fences.scope.decide_own_history`: this key's earlier try published (replace
  or relocate it by merges only: a hard reset would drop the other writers' publications on top of
  it), this very attempt already did (a lost answer: idempotent), or someone else did (fail closed);
* with the hard fence v2 on the input, a first try sends the scoped merge at once and reads the
  target only when lakeFS refuses it;
* after a merge the soft fence verifies it: when lakeFS computed the merge on a HEAD other than the
  one probed, the scope is probed again up to that HEAD, and any change is a race the publication lost.

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field

from airflow_lakefence import failpoints
from airflow_lakefence.core.advice import WHAT_TO_DO
from airflow_lakefence.core.fences.attempt import AttemptGuard
from airflow_lakefence.core.fences.hard import EXPECTED_HEAD_KEY, NO_HARD_FENCE, HardFenceStatus
from airflow_lakefence.core.fences.publish import Action, FenceDecision, HeadState
from airflow_lakefence.core.fences.scope import (
    OWN_HISTORY_PAGE,
    RACE_REVERT_KEY,
    Scope,
    ScopedAction,
    ScopeScan,
    Touch,
    decide_own_history,
    describe_conflict,
    race_revert_metadata,
    scoped_revert_metadata,
    verify_after_merge,
)
from airflow_lakefence.core.names.keys import AttemptId
from airflow_lakefence.core.ports import CommitInfo, LakeFSPort
from airflow_lakefence.core.publication.replacement import replace_through_temp_branch, temp_branch_name
from airflow_lakefence.core.publication.staged import StagedOutput
from airflow_lakefence.core.publication.target_merge import TargetMerge
from airflow_lakefence.core.records.metadata import (
    ROLE_PUBLISH,
    ROLE_STAGE,
    LakeFenceRecord,
    decode_metadata,
    encode_metadata,
)
from airflow_lakefence.core.records.reporting import Log
from airflow_lakefence.core.request import PublishRequest, read_target_head
from airflow_lakefence.exceptions import (
    LakeFenceError,
    PublishFenceError,
    PublishRaceError,
    ScopeOverlapError,
)

__all__ = ["ScopedPublish"]

#: The scan asks lakeFS for the first changed path of a prefix: the input is an ancestor of the
#: target's HEAD (proven in step 1), so comparing the two trees answers "what changed since the input"
#: (what lakeFS's three-dot diff would say) without computing a merge base.
SCAN_DIFF = "two_dot"

#: How many commits of the target's own line (its merges) a lost merge answer looks through for the
#: attempt's merge commit: the page lakeFS returns in one call, bounded by the input commit.
OWN_MERGE_PAGE = 1000
#: How many times a race loser tries to take its merge back before it reports that it could not.
TAKE_BACK_ROUNDS = 3


def _publishes(metadata: Mapping[str, str], attempt: AttemptId) -> bool:
    """Whether a commit is ``attempt``'s publication (its ``publish`` record names the attempt)."""
    record = decode_metadata(metadata)
    return record is not None and record.role == ROLE_PUBLISH and record.attempt == attempt


@dataclass
class ScopedPublish:
    """One scoped publish (steps 10 and 11): the scoped strategy of the publisher.

    :param lakefs: the lakeFS port.
    :param request: the validated request.
    :param scope: the request's scope.
    :param guard: the attempt's guard (the attempt fence between rounds, lost answers).
    :param log: where to log.
    :param merging: how merges into the target are sent and their refusals read.
    :param hard_fence: the hard fence's status, as the check before the job left it.
    """

    lakefs: LakeFSPort
    request: PublishRequest
    scope: Scope
    guard: AttemptGuard
    log: Log
    merging: TargetMerge
    hard_fence: HardFenceStatus = NO_HARD_FENCE
    repo: str = field(init=False)
    target: str = field(init=False)

    def __post_init__(self) -> None:
        self.repo = self.request.repository
        self.target = self.request.target_branch

    def read_ahead(self, attempt: AttemptId, input_commit: str) -> None:
        """Nothing is read ahead: the scope's reads follow the staged commit (see
        :class:`~airflow_lakefence.core.publication.publisher.PublishStrategy`)."""

    def verification(self) -> Future[None] | None:
        """None: a scoped publish verifies before it returns (see
        :class:`~airflow_lakefence.core.publication.publisher.PublishStrategy`)."""
        return None

    def settle(self) -> None:
        """Nothing is in flight after :meth:`publish` (see
        :class:`~airflow_lakefence.core.publication.publisher.PublishStrategy`)."""

    def publish(self, output: StagedOutput) -> tuple[FenceDecision, str]:
        """Decide on the target's HEAD within the scope and act (see
        :class:`~airflow_lakefence.core.publication.publisher.PublishStrategy`)."""
        return self.guard.write_once("publish", functools.partial(self._round, output), staging=output.staging)

    def _round(self, output: StagedOutput, answer_lost: bool) -> tuple[FenceDecision, str]:
        """One publish round within the scope: after a lost answer, first whether the merge landed."""
        attempt, staging, input_commit, staged, record = output
        changed = staged.id != input_commit
        if answer_lost:
            landed = self._landed(attempt, input_commit)
            if landed is not None:
                # The merge landed although its answer was lost: verify it as any merge, report it.
                if not self.hard_fence.intact:
                    base = landed.metadata.get(EXPECTED_HEAD_KEY) or input_commit
                    self._verify(landed, base, base, staged.id, staging)
                reason = "this attempt's merge landed although its answer was lost"
                return self._done(Action.IDEMPOTENT, reason, landed.id)
        if self.hard_fence.relied_on and changed and not answer_lost:
            # lakeFS checks the scope since the input inside the merge: no read before it.
            try:
                merged = self._merge(attempt, staging, staged.id, input_commit, record, probed=None, staged=staged.id)
                return self._done(Action.MERGE, "lakeFS's hard fence found the scope untouched", merged)
            except PublishFenceError as exc:
                # Refused by the fence (the scope changed since the input, e.g. an earlier try of
                # this key published) or a conflict: nothing landed. Read and decide.
                if not self.merging.nothing_landed(exc):
                    raise
                self.log.info("%s: reading the target to decide again", exc)
        head = read_target_head(self.lakefs, self.request)
        return self._decide_and_act(head, attempt, staging, input_commit, staged, record, changed)

    # -- deciding ------------------------------------------------------------------------------

    def _decide_and_act(
        self,
        head: HeadState,
        attempt: AttemptId,
        staging: str,
        input_commit: str,
        staged: CommitInfo,
        record: Mapping[str, str],
        changed: bool,
    ) -> tuple[FenceDecision, str]:
        failpoints.hit("after_publish_read")
        scan = ScopeScan(self.scope, head.commit_id, input_commit)
        self._run(scan, input_commit, head.commit_id)
        decision = scan.decide(changed=changed)
        self.log.info("Scoped publish fence: %s (%s)", decision.action.value, decision.reason)
        if decision.action is ScopedAction.MERGE:
            output = self._merge(
                attempt, staging, staged.id, input_commit, record, probed=head.commit_id, staged=staged.id
            )
            return self._done(Action.MERGE, decision.reason, output)
        if decision.action is ScopedAction.NOOP:
            return self._done(Action.NOOP, decision.reason, input_commit)
        if decision.action is ScopedAction.FAIL_CLOSED:
            touch = next(t for t in decision.touches if t.write_prefix is None)
            raise self._conflict(touch, None, input_commit, head.commit_id, staging)
        # INSPECT: only the write set changed since the input: whose commits are they?
        commits = self.lakefs.log_commits(
            self.repo, head.commit_id, prefixes=self.scope.output_prefixes, amount=OWN_HISTORY_PAGE
        )
        own = decide_own_history(
            self.scope, commits, attempt=attempt, input_ref=input_commit, head=head.commit_id, changed=changed
        )
        self.log.info("Scoped publish fence: %s (%s)", own.action.value, own.reason)
        if own.action is ScopedAction.FAIL_CLOSED:
            touch = decision.touches[0]
            raise self._conflict(touch, own.culprit, input_commit, head.commit_id, staging, own.reason)
        if own.action is ScopedAction.IDEMPOTENT:
            # Its merge landed although its answer was lost, further down than one page of the
            # target's line (see _landed): HEAD holds it.
            self.log.warning(
                "This attempt's merge commit is not among the %d newest of %r: reporting HEAD %s, which holds it",
                OWN_MERGE_PAGE,
                self.target,
                head.commit_id,
            )
            return self._done(Action.IDEMPOTENT, own.reason, head.commit_id)
        if own.action is ScopedAction.NOOP:
            return self._done(Action.NOOP, own.reason, input_commit)
        for ref, prefix in own.content_check:
            # The write set must hold exactly that publication's content: nobody else's change survives.
            [*left] = self.lakefs.diff_refs(self.repo, ref, head.commit_id, prefix=prefix, diff_type="two_dot", limit=1)
            if left:
                touch = Touch(prefix, left[0].path, prefix)
                raise self._conflict(touch, None, input_commit, head.commit_id, staging)
        action = Action.REPLACE if own.action is ScopedAction.REPLACE else Action.RELOCATE
        output = self._replace(attempt, staging, input_commit, staged.id, record, head, own.unwind)
        return self._done(action, own.reason, output, own.unwind)

    def _landed(self, attempt: AttemptId, input_commit: str) -> CommitInfo | None:
        """This attempt's merge commit on the target, if a merge whose answer was lost landed (one ``log``).

        The target's own line (first parents: its merges, not what they merged) down to the input:
        the merge is found wherever it stands, other writers' publications on top of it or not.
        """
        line = self.lakefs.log_commits(
            self.repo, self.target, amount=OWN_MERGE_PAGE, first_parent=True, stop_at=input_commit
        )
        return next((c for c in line if _publishes(c.metadata, attempt)), None)

    def _run(self, scan: ScopeScan, left: str, right: str) -> None:
        """Ask lakeFS the scan's questions: the first changed path of each fenced prefix (one call each)."""
        while (query := scan.next_query()) is not None:
            changes = self.lakefs.diff_refs(
                self.repo, left, right, prefix=query.prefix, after=query.after, diff_type=SCAN_DIFF, limit=1
            )
            first = next(iter(changes), None)
            scan.record(query, None if first is None else first.path, getattr(first, "type", "") or "")

    def _conflict(
        self, touch: Touch, culprit: CommitInfo | None, input_commit: str, head: str, staging: str, why: str = ""
    ) -> PublishFenceError:
        """The fail-closed error naming the commit that changed ``touch`` (one ``log`` call when not known)."""
        if culprit is None:
            found = self.lakefs.log_commits(self.repo, head, objects=[touch.path], amount=1)
            culprit = found[0] if found else None
        text = describe_conflict(touch, culprit, input_ref=input_commit, head=head, target=self.target)
        if why:
            text += f" ({why})"
        return ScopeOverlapError(f"{text} Staging branch: {staging!r}.", staging_branch=staging)

    # -- acting --------------------------------------------------------------------------------

    def _merge(
        self,
        attempt: AttemptId,
        staging: str,
        source: str,
        base: str,
        record: Mapping[str, str],
        *,
        probed: str | None,
        staged: str,
        allow_empty: bool = False,
    ) -> str:
        """Merge ``source`` into the target naming ``base`` and the scope (the hard fence's check); verify.

        :param probed: the HEAD the scan probed; ``None`` when nothing was probed (the hard fence's first send).
        :param staged: the staged commit the merge brings in (named by a take-back).
        :param allow_empty: merge even when ``source`` brings no change (a replacement's last merge).
        """
        metadata = {**record, **self.scope.merge_metadata(base)}
        head = HeadState(probed or base)
        merge_ref = self.merging.send(attempt, staging, source, metadata, head, allow_empty=allow_empty)
        failpoints.hit("after_publish_action")
        if not self.hard_fence.intact:
            self._verify(self.lakefs.get_commit(self.repo, merge_ref), base, probed or base, staged, staging)
        return merge_ref

    def _verify(self, merged: CommitInfo, base: str, probed: str, staged: str, staging: str) -> None:
        """Step 11: what lakeFS merged onto must leave the scope as probed (0 calls when it is the probed HEAD).

        A merge computed on a HEAD where the scope changed since ``base`` lost a race: this attempt
        takes it back before raising, so the target ends as if it had failed closed.

        :raises ScopeOverlapError: the race was lost and the merge taken back.
        :raises PublishRaceError: the race was lost and the merge could not be taken back.
        """
        first = HeadState.of(merged).first_parent or ""
        again = verify_after_merge(self.scope, merge_first_parent=first, probed_head=probed, input_ref=base)
        if not again:
            return
        scan = ScopeScan(self.scope, first, base)
        self._run(scan, base, first)
        touches = scan.decide(changed=True).touches
        if touches:
            raise self._take_back(merged, first, touches[0], base, staged, staging)

    def _take_back(
        self, merged: CommitInfo, first: str, touch: Touch, base: str, staged: str, staging: str
    ) -> PublishFenceError:
        """Revert a merge that lost a race in its scope (one ``log`` call and one ``revert``); the error to raise.

        The revert commit undoes the merge against its first parent, on top of whatever the target
        holds now (merges and reverts only: other writers' publications stay). It names the merge and
        its staged commit (:func:`~airflow_lakefence.core.fences.scope.race_revert_metadata`), so the fence
        and the sensor look past both (:func:`~airflow_lakefence.core.fences.scope.surviving`).
        """
        found = self.lakefs.log_commits(self.repo, first, objects=[touch.path], amount=1)
        text = describe_conflict(touch, found[0] if found else None, input_ref=base, head=first, target=self.target)
        metadata = race_revert_metadata(merged.id, staged)
        own_line = 1 + list(merged.parents).index(first)
        failure: LakeFenceError | None = None
        for round_number in range(TAKE_BACK_ROUNDS):
            try:
                self.lakefs.revert(
                    self.repo,
                    self.target,
                    merged.id,
                    parent_number=own_line,
                    message=f"lakefence: take back {merged.id}, which lost a publish race in its scope",
                    metadata=metadata,
                )
                failure = None
                break
            except LakeFenceError as exc:
                # Other losers revert at the same moment (lakeFS may refuse a concurrent branch
                # update), or the answer was lost: did it land? Never revert twice.
                failure = exc
                self.log.warning("Taking back %s failed (%s): reading the target", merged.id, exc)
                if self._taken_back(merged.id):
                    failure = None
                    break
                time.sleep(0.2 * (round_number + 1))
        if failure is not None:
            return PublishRaceError(
                f"merge commit {merged.id} was computed on {first}, not the HEAD the fence probed, and "
                f"{touch.path!r} inside the scope changed in between: another writer raced the publish. Taking "
                f"the merge back failed ({failure}), so {self.target!r} may hold this attempt's output beside the "
                f"other writer's; staging branch {staging!r} kept. {WHAT_TO_DO} revert it by hand "
                f"(lakectl branch revert lakefs://{self.repo}/{self.target} {merged.id} "
                f"--parent-number {own_line}), then clear the task.",
                staging_branch=staging,
            )
        self.log.warning("Merge %s lost a race in its scope: taken back by a revert commit", merged.id)
        return ScopeOverlapError(
            f"{text} This attempt's merge {merged.id} landed in that race (lakeFS computed it on {first}) and "
            f"was taken back by a revert commit on {self.target!r}. Staging branch: {staging!r}.",
            staging_branch=staging,
        )

    def _taken_back(self, merge: str) -> bool:
        """Whether a revert taking ``merge`` back is on the target's line above it (one ``log`` call)."""
        line = self.lakefs.log_commits(self.repo, self.target, amount=OWN_MERGE_PAGE, first_parent=True, stop_at=merge)
        return any(c.metadata.get(RACE_REVERT_KEY) == merge for c in line)

    def _replace(
        self,
        attempt: AttemptId,
        staging: str,
        input_commit: str,
        staged: str,
        record: Mapping[str, str],
        head: HeadState,
        unwind: str | None,
    ) -> str:
        """Replace (or relocate) this key's earlier publication below HEAD by merges only.

        :func:`~airflow_lakefence.core.publication.replacement.replace_through_temp_branch` from HEAD: a revert of
        the earlier try's staged commit (carrying this attempt's ``stage`` record, so a later try
        knows it as its key's own), the staged commit merged (a relocation skips it), the result
        merged into the target naming HEAD as the scope's base. Every other writer's publication
        stays as it is.
        """
        stage_record = encode_metadata(LakeFenceRecord(attempt, ROLE_STAGE, input_commit))

        def deleted_later(exc: LakeFenceError) -> None:
            self.log.warning("Could not delete temporary branch %s: %s (the cleaner will)", temp, exc)

        temp = temp_branch_name(staging)
        outcome = replace_through_temp_branch(
            self.lakefs,
            repository=self.repo,
            temp_branch=temp,
            head_commit=head.commit_id,
            unwind=unwind,
            revert_message=f"lakefence: revert the abandoned publication {unwind} (scoped)",
            revert_metadata=scoped_revert_metadata(stage_record, unwind) if unwind is not None else {},
            input_commit=input_commit,
            staged_commit=staged,
            message=self.request.message(ROLE_PUBLISH, attempt),
            publish=lambda source, _link: self._merge(
                attempt, staging, source, head.commit_id, record, probed=head.commit_id, staged=staged, allow_empty=True
            ),
            on_delete_error=deleted_later,
        )
        return outcome.output_ref

    def _done(self, action: Action, reason: str, output: str, replaces: str | None = None) -> tuple[FenceDecision, str]:
        # A replacement names the commit it took back: the write set's latest publication of this key.
        return FenceDecision(action, output, reason, replaces=replaces), output
