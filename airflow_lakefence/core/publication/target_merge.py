"""Merging into the target: the one place where lakeFS's answers to a publishing merge get their meaning.

Both publish strategies (branch-wide, :mod:`airflow_lakefence.core.publication.publisher`; scoped,
:mod:`airflow_lakefence.core.publication.scoped_publisher`) send their merges through :class:`TargetMerge`, which
turns each refusal the adapter classified (a hook's 412, a conflict, a dirty target, a 400, a
late "no changes") into the protocol error it is.

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

from collections.abc import Mapping

from airflow_lakefence.core.advice import WHAT_TO_DO
from airflow_lakefence.core.fences.hard import SCOPED_VERSION, MergeRejection, RejectionKind, explain_scoped_rejection
from airflow_lakefence.core.fences.publish import HeadState
from airflow_lakefence.core.names.keys import AttemptId
from airflow_lakefence.core.ports import LakeFSPort
from airflow_lakefence.core.records.metadata import ROLE_PUBLISH
from airflow_lakefence.core.request import PublishRequest
from airflow_lakefence.exceptions import (
    HardFenceRaceError,
    LakeFSBadRequestError,
    LakeFSConflictError,
    LakeFSDirtyBranchError,
    LakeFSHardFenceRejectedError,
    LakeFSHookRejectedError,
    LakeFSNoChangesError,
    LakeFSPreconditionFailedError,
    LakeFSUnavailableError,
    MergeHookRejectedError,
    PublishFenceError,
    PublishRaceError,
    ScopeOverlapError,
)

__all__ = ["TargetMerge"]


class TargetMerge:
    """Send a publishing merge into the request's target and interpret lakeFS's answer.

    :param lakefs: the lakeFS port.
    :param request: the validated request (repository, target, scope, message).
    """

    def __init__(self, lakefs: LakeFSPort, request: PublishRequest) -> None:
        self.lakefs = lakefs
        self.request = request

    def send(
        self,
        attempt: AttemptId,
        staging: str,
        source: str,
        metadata: Mapping[str, str],
        head: HeadState,
        *,
        allow_empty: bool = False,
    ) -> str:
        """Merge ``source`` into the target; lakeFS's refusals become what they mean for the protocol.

        :param attempt: this attempt.
        :param staging: its staging branch (kept as evidence when failing closed).
        :param source: the ref to merge.
        :param metadata: the merge's metadata.
        :param head: the target's HEAD the merge is built on (for messages).
        :param allow_empty: merge even when ``source`` brings no change (a replacement's last merge).
        :return: the merge commit id.
        :raises PublishFenceError: (or a subclass) when nothing was merged.
        :raises LakeFSUnavailableError: when the outcome is unknown.
        """
        repo, target = self.request.repository, self.request.target_branch
        try:
            message = self.request.message(ROLE_PUBLISH, attempt)
            if allow_empty:
                return self.lakefs.merge(repo, source, target, message, metadata, allow_empty=True)
            return self.lakefs.merge(repo, source, target, message, metadata)
        except LakeFSHookRejectedError as exc:
            raise self.rejection(exc, head, staging) from exc
        except LakeFSConflictError as exc:
            if self.request.scope is not None:
                # Only another writer's change to a path this publication changed conflicts: an overlap.
                raise ScopeOverlapError(
                    f"merge into {target!r} conflicted: another writer's publication changed a path under this "
                    f"one's write set since its input. Nothing was published; staging branch {staging!r} kept.",
                    staging_branch=staging,
                ) from exc
            raise PublishRaceError(
                f"merge into {target!r} conflicted: another writer raced the publish", staging_branch=staging
            ) from exc
        except LakeFSPreconditionFailedError as exc:
            # A 412 on a merge is a failed pre-merge hook whose message did not say so.
            raise MergeHookRejectedError(
                f"a pre-merge hook rejected the publication into {target!r} (action run unknown): {exc}. "
                f"Nothing merged; staging branch {staging!r} kept. {WHAT_TO_DO} read the repository's action "
                "runs (lakectl actions runs list), fix what the hook rejects, then clear the task.",
                staging_branch=staging,
            ) from exc
        except LakeFSNoChangesError as exc:
            # The staged commit is already in the target: an earlier request landed late. Its
            # outcome is re-read in the next round (the idempotent row), never merged again.
            raise LakeFSUnavailableError(
                f"merge answered 'no changes': {exc}", status=exc.status, operation="merge"
            ) from exc
        except LakeFSDirtyBranchError as exc:
            raise PublishRaceError(
                f"{target!r} has uncommitted changes: another writer is active on it; nothing merged. "
                f"{WHAT_TO_DO} find the writer (one writer per target), then clear the task.",
                staging_branch=staging,
            ) from exc
        except LakeFSBadRequestError as exc:
            raise PublishFenceError(
                f"lakeFS refused the merge into {target!r}: {exc}. Nothing merged; staging branch "
                f"{staging!r} kept. {WHAT_TO_DO} read lakeFS's reason above, fix it, then clear the task.",
                staging_branch=staging,
            ) from exc

    @staticmethod
    def nothing_landed(exc: PublishFenceError) -> bool:
        """Whether a refused merge left the target as it was and the target is worth reading again:
        a hard fence's refusal (a race lost, or an earlier try's publication to replace) or a conflict.

        :param exc: what :meth:`send` raised.
        """
        return isinstance(exc, (HardFenceRaceError, ScopeOverlapError)) or isinstance(
            exc.__cause__, LakeFSConflictError
        )

    def rejection(self, exc: LakeFSHookRejectedError, head: HeadState, staging: str) -> PublishFenceError:
        """What a pre-merge hook's refusal means: the hard fence's (a race, or an installation to
        upgrade), or a user's hook's.

        :param exc: lakeFS's refusal, as the adapter classified it.
        :param head: the target's HEAD the merge was built on.
        :param staging: the staging branch (kept as evidence).
        """
        target = self.request.target_branch
        if isinstance(exc, LakeFSHardFenceRejectedError) and self.request.scope is not None:
            rejection = MergeRejection(
                RejectionKind.HARD_FENCE,
                exc.run_id,
                exc.found_head,
                exc.expected_head,
                exc.version,
                exc.scope_prefix,
                exc.path,
            )
            text = explain_scoped_rejection(rejection, target=target)
            text = f"{text}; nothing published, staging branch {staging!r} kept"
            if exc.version is not None and exc.version < SCOPED_VERSION:
                return PublishFenceError(text, staging_branch=staging)  # an installation to upgrade, not a race
            return ScopeOverlapError(text, staging_branch=staging)  # the soft fence's outcome, prevented
        if isinstance(exc, LakeFSHardFenceRejectedError):
            return HardFenceRaceError(
                f"lakeFS's hard fence refused the merge into {target!r}: it moved to {exc.found_head} since the "
                f"fence read {head.commit_id}; nothing published, {target!r} left as the other writer left it "
                f"(action run {exc.run_id})",
                staging_branch=staging,
            )
        return MergeHookRejectedError(
            f"a pre-merge hook of the repository rejected the publication into {target!r} (action run "
            f"{exc.run_id}): {exc}. Nothing merged; staging branch {staging!r} kept. {WHAT_TO_DO} read the hook "
            f"run (lakectl actions runs describe lakefs://{self.request.repository} {exc.run_id}), fix what it "
            "rejects, then clear the task.",
            staging_branch=staging,
        )
