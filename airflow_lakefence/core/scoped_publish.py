"""Steps 10 and 11 in the scoped mode: the publish fence on the declared prefixes, not the whole branch.

The pure decisions live in :mod:`airflow_lakefence.core.scope`; this module asks lakeFS the questions
they name and acts on the answers, through the same :class:`~airflow_lakefence.core.publish.Publisher`
(its merge and the translation of lakeFS's refusals):

* the target's HEAD *H* is the input *I*: merge (or no-op), as in the branch-wide mode;
* otherwise one diff per fenced prefix between *I* and *H* (:class:`~airflow_lakefence.core.scope.ScopeScan`):
  the scope untouched → merge the staged commit onto *H* (lakeFS's three-way merge of disjoint
  changes), or no-op; the read set touched → fail closed, naming the commit (one ``log`` call); only
  the write set touched → read the commits that changed it (one ``log`` call) and
  :func:`~airflow_lakefence.core.scope.decide_own_history`: this key's earlier try published (replace
  or relocate it by merges only: a hard reset would drop the other writers' publications on top of
  it), this very attempt already did (a lost answer: idempotent), or someone else did (fail closed);
* with the hard fence v2 on the input, a first try sends the scoped merge at once and reads the
  target only when lakeFS refuses it;
* after a merge the soft fence verifies it: when lakeFS computed the merge on a HEAD other than the
  one probed, the scope is probed again up to that HEAD, and any change is a race the publication lost.

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from airflow_lakefence import failpoints
from airflow_lakefence.core.fence import Action, FenceDecision, HeadState
from airflow_lakefence.core.keys import AttemptId
from airflow_lakefence.core.merge_only import temp_branch_name
from airflow_lakefence.core.metadata import ROLE_PUBLISH, ROLE_STAGE, LakeFenceRecord, encode_metadata
from airflow_lakefence.core.ports import CommitInfo
from airflow_lakefence.core.request import read_target_head
from airflow_lakefence.core.scope import (
    OWN_HISTORY_PAGE,
    Scope,
    ScopedAction,
    ScopeScan,
    Touch,
    decide_own_history,
    describe_conflict,
    scoped_revert_metadata,
    verify_after_merge,
)
from airflow_lakefence.exceptions import (
    HardFenceRaceError,
    LakeFenceError,
    LakeFSConflictError,
    PublishFenceError,
    PublishRaceError,
)

if TYPE_CHECKING:
    from airflow_lakefence.core.publish import Publisher

__all__ = ["ScopedPublish"]

#: The scan asks lakeFS for the first changed path of a prefix: the input is an ancestor of the
#: target's HEAD (proven in step 1), so comparing the two trees answers "what changed since the input"
#: (what lakeFS's three-dot diff would say) without computing a merge base.
SCAN_DIFF = "two_dot"


class ScopedPublish:
    """One scoped publish (steps 10 and 11), acting through ``publisher``.

    :param publisher: the attempt's publisher (its port, request, guard, log and hard-fence state).
    :param scope: the request's scope.
    """

    def __init__(self, publisher: Publisher, scope: Scope) -> None:
        self.p = publisher
        self.scope = scope
        self.lakefs = publisher.lakefs
        self.repo = publisher.request.repository
        self.target = publisher.request.target_branch

    def publish(
        self, attempt: AttemptId, staging: str, input_commit: str, staged: CommitInfo, record: Mapping[str, str]
    ) -> tuple[FenceDecision, str]:
        """Decide on the target's HEAD within the scope and act; return the decision and the output ref.

        :param attempt: this attempt.
        :param staging: its staging branch.
        :param input_commit: the input commit.
        :param staged: the staged commit.
        :param record: the publication's metadata (the ``publish`` record and the user's metadata).
        :raises PublishFenceError: (or a subclass) when failing closed; the caller keeps the evidence.
        """
        changed = staged.id != input_commit

        def publish_round(answer_lost: bool) -> tuple[FenceDecision, str]:
            if answer_lost:
                # The try may have been cleared while the answer was lost: never write for a stale try.
                self.p.guard.check("before another publish round", staging)
            if self.p.hard_fence and changed and not answer_lost:
                # lakeFS checks the scope since the input inside the merge: no read before it.
                try:
                    output = self._merge(attempt, staging, staged.id, input_commit, record, probed=None)
                    return self._done(Action.MERGE, "lakeFS's hard fence found the scope untouched", output)
                except PublishRaceError as exc:
                    # Refused by the fence (the scope changed since the input, e.g. an earlier try of
                    # this key published) or a conflict: nothing landed. Read and decide.
                    if not isinstance(exc, HardFenceRaceError) and not isinstance(exc.__cause__, LakeFSConflictError):
                        raise
                    self.p.log.info("%s: reading the target to decide again", exc)
            head = read_target_head(self.lakefs, self.p.request)
            return self._decide_and_act(head, attempt, staging, input_commit, staged, record, changed)

        return self.p.guard.settle("publish", publish_round, lambda _exc: None)

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
        self.p.log.info("Scoped publish fence: %s (%s)", decision.action.value, decision.reason)
        if decision.action is ScopedAction.MERGE:
            output = self._merge(attempt, staging, staged.id, input_commit, record, probed=head.commit_id)
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
        self.p.log.info("Scoped publish fence: %s (%s)", own.action.value, own.reason)
        if own.action is ScopedAction.FAIL_CLOSED:
            touch = decision.touches[0]
            raise self._conflict(touch, own.culprit, input_commit, head.commit_id, staging, own.reason)
        if own.action is ScopedAction.IDEMPOTENT:
            # A previous round's merge landed although its answer was lost: HEAD holds it.
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
        return self._done(action, own.reason, output)

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
        return PublishFenceError(f"{text} Staging branch: {staging!r}.", staging_branch=staging)

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
    ) -> str:
        """Merge ``source`` into the target naming ``base`` and the scope (the hard fence's check); verify.

        :param probed: the HEAD the scan probed; ``None`` when nothing was probed (the hard fence's first send).
        """
        metadata = {**record, **self.scope.merge_metadata(base)}
        merge_ref = self.p.send_merge(attempt, staging, source, metadata, HeadState(probed or base))
        failpoints.hit("after_publish_action")
        if not self.p.hard_fence_intact:
            self._verify(merge_ref, base, probed or base, staging)
        return merge_ref

    def _verify(self, merge_ref: str, base: str, probed: str, staging: str) -> None:
        """Step 11: what lakeFS merged onto must leave the scope as probed (0 calls when it is the probed HEAD)."""
        merged = self.lakefs.get_commit(self.repo, merge_ref)
        first = HeadState.of(merged).first_parent or ""
        again = verify_after_merge(self.scope, merge_first_parent=first, probed_head=probed, input_ref=base)
        if not again:
            return
        scan = ScopeScan(self.scope, first, base)
        self._run(scan, base, first)
        touches = scan.decide(changed=True).touches
        if touches:
            raise PublishRaceError(
                f"merge commit {merge_ref} was computed on {first}, not the probed HEAD {probed}, and "
                f"{touches[0].path!r} inside the scope changed in between: another writer raced the publish; "
                f"{self.target!r} left as is, staging branch {staging!r} kept",
                staging_branch=staging,
            )

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

        A hidden branch *X* from HEAD; a revert of the earlier try's staged commit (carrying this
        attempt's ``stage`` record, so a later try knows it as its key's own); the staged commit merged
        into *X* (a relocation skips it); *X* merged into the target naming HEAD as the scope's base;
        *X* deleted. Every other writer's publication stays as it is.
        """
        temp = temp_branch_name(staging)
        self.lakefs.create_branch(self.repo, temp, head.commit_id, hidden=True)
        try:
            if unwind is not None:
                stage_record = encode_metadata(LakeFenceRecord(attempt, ROLE_STAGE, input_commit))
                self.lakefs.revert(
                    self.repo,
                    temp,
                    unwind,
                    parent_number=1,
                    message=f"lakefence: revert the abandoned publication {unwind} (scoped)",
                    metadata=scoped_revert_metadata(stage_record, unwind),
                )
            if staged != input_commit:
                self.lakefs.merge(self.repo, staged, temp, self.p.request.message(ROLE_PUBLISH, attempt), {})
            return self._merge(attempt, staging, temp, head.commit_id, record, probed=head.commit_id)
        finally:
            # Each round makes its own temporary branch: deleted every time (it holds nothing the target needs).
            try:
                self.lakefs.delete_branch(self.repo, temp)
            except LakeFenceError as exc:
                self.p.log.warning("Could not delete temporary branch %s: %s (the cleaner will)", temp, exc)

    def _done(self, action: Action, reason: str, output: str) -> tuple[FenceDecision, str]:
        return FenceDecision(action, output, reason), output
