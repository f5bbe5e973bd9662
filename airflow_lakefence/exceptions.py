"""The package's exception tree: every class the package raises is defined here.

Every failure the package raises derives from :class:`LakeFenceError`, so a DAG author can catch
one root. lakeFS SDK and HTTP errors are translated into :class:`LakeFSError` subclasses once, at
the adapter boundary (:mod:`airflow_lakefence.lakefs_adapter.errors`); no SDK exception, and no sorting of
lakeFS's messages by their text, leaks past it.

Messages never contain credentials: they name the repository, branch, ref and operation only.

The hierarchy::

    LakeFenceError
    ├── InvalidInputError (ValueError)           bad arguments; raised before any lakeFS write
    │   ├── InputRefError                        input unknown, not a commit, or not on the target
    │   ├── HardFenceMissingError                hard_fence="require" but the input lacks it
    │   ├── S3AConfigError                       the S3A set-up cannot work
    │   └── DeltaOutputModeError                 file-level replace declared on a Delta table root
    ├── WorkspaceError                           the job's workspace is missing or rejected
    ├── JobError                                 the attempt's job failed; nothing staged
    │   └── SparkJobError
    ├── JobEnvironmentError (RuntimeError)       the job's environment lacks what the operator passes
    ├── StaleAttemptError                        no longer the current try; nothing more written
    │   └── RunStateConflictError                another live try of the run wrote the run state first
    ├── PublishFenceError                        failed closed; the staging branch kept as evidence
    │   ├── OutputPrefixError                    changed paths outside output_prefixes
    │   ├── PublishRaceError                     another writer raced the publish
    │   │   └── HardFenceRaceError               lakeFS's hard fence refused the merge
    │   ├── ScopeOverlapError                    scoped: another writer changed the scope; nothing left
    │   ├── MergeHookRejectedError               a user's pre-merge hook refused the merge
    │   └── DeltaLogError                        a staged Delta change is not commits appended in order
    ├── PublishBudgetError                       too little time left to start publishing
    ├── RunBranchError                           a branch of the run branch's name was not made by this run
    ├── HardFenceInstallError                    the hard fence could not be installed
    └── LakeFSError                              a lakeFS call failed (status, operation)
        ├── LakeFSBadRequestError                400
        │   ├── LakeFSNoChangesError             400 "no changes" (commit, merge)
        │   └── LakeFSDirtyBranchError           400 uncommitted changes refuse the operation
        ├── LakeFSAuthError                      401, 403
        ├── LakeFSBranchProtectedError           403 on a protected branch
        ├── LakeFSNotFoundError                  404
        │   └── LakeFSRepositoryNotFoundError    404 naming the repository
        ├── LakeFSConflictError                  409
        ├── LakeFSPreconditionFailedError        412
        │   └── LakeFSHookRejectedError          412 from a pre-merge hook
        │       └── LakeFSHardFenceRejectedError the hard fence's hook
        └── LakeFSUnavailableError               5xx, 429: a write's outcome is unknown
            └── LakeFSConnectionError            no response at all
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypedDict, Unpack

    class _LakeFSAnswer(TypedDict, total=False):
        """What :class:`LakeFSError` records of lakeFS's answer: the keywords its subclasses pass on."""

        status: int | None
        operation: str
        server_message: str | None

__all__ = [
    "DeltaLogError",
    "DeltaOutputModeError",
    "HardFenceInstallError",
    "HardFenceMissingError",
    "HardFenceRaceError",
    "InputRefError",
    "InvalidInputError",
    "JobEnvironmentError",
    "JobError",
    "LakeFSAuthError",
    "LakeFSBadRequestError",
    "LakeFSBranchProtectedError",
    "LakeFSConflictError",
    "LakeFSConnectionError",
    "LakeFSDirtyBranchError",
    "LakeFSError",
    "LakeFSHardFenceRejectedError",
    "LakeFSHookRejectedError",
    "LakeFSNoChangesError",
    "LakeFSNotFoundError",
    "LakeFSPreconditionFailedError",
    "LakeFSRepositoryNotFoundError",
    "LakeFSUnavailableError",
    "LakeFenceError",
    "MergeHookRejectedError",
    "OutputPrefixError",
    "PublishBudgetError",
    "PublishFenceError",
    "PublishRaceError",
    "RunBranchError",
    "S3AConfigError",
    "ScopeOverlapError",
    "SparkJobError",
    "StaleAttemptError",
    "WorkspaceError",
]


class LakeFenceError(Exception):
    """Root of every error raised by airflow-lakefence."""


class InvalidInputError(LakeFenceError, ValueError):
    """An operator argument or a templated value is invalid; raised before any lakeFS write."""


class InputRefError(InvalidInputError):
    """The input ref does not exist, is not a commit, or cannot be the base of the target."""


class WorkspaceError(LakeFenceError):
    """The workspace directory is missing, unreadable or not what the write mode expects."""


class JobError(LakeFenceError):
    """The attempt's job (a Spark application, a Python function) failed; nothing was staged or published."""


class SparkJobError(JobError):
    """The Spark job failed; nothing was staged or published."""


class JobEnvironmentError(LakeFenceError, RuntimeError):
    """The job's environment lacks what the operator passes (locations, credentials, S3A)."""


class S3AConfigError(InvalidInputError):
    """The S3A set-up cannot work: no hadoop-aws, or one that does not match Spark's Hadoop."""


class StaleAttemptError(LakeFenceError):
    """This process is no longer the current Airflow attempt of its task; nothing more is written."""


class RunStateConflictError(StaleAttemptError):
    """Another live try of the run wrote a different value under a write-once run-state key first
    (the input pin): this try stops before acting on its own."""


class PublishFenceError(LakeFenceError):
    """The target branch is in a state the protocol cannot explain; the publish failed closed.

    :param message: what was found.
    :param staging_branch: the staging branch kept as evidence, if any.
    """

    def __init__(self, message: str, *, staging_branch: str | None = None) -> None:
        super().__init__(message)
        self.staging_branch = staging_branch


class RunBranchError(LakeFenceError):
    """A run branch cannot be used: a branch of its name exists that this run did not make from its input."""


class OutputPrefixError(PublishFenceError):
    """The attempt changed paths outside the declared ``output_prefixes``; nothing was published."""


class PublishRaceError(PublishFenceError):
    """Verification after acting found that another writer raced the publish.

    The target branch is left as it is (never "fixed" silently) and the staging branch is kept.
    """


class ScopeOverlapError(PublishFenceError):
    """Scoped mode: another writer's publication changed this publication's read or write set since its input.

    One outcome whichever fence saw it: the soft fence's scan before the merge, lakeFS's hard fence
    refusing the merge, or the soft fence's check after a merge that lost the race (the attempt then
    took its own merge back with a revert commit before raising). Nothing of this attempt's output
    stays on the target; the staging branch is kept as evidence.
    """


class PublishBudgetError(LakeFenceError):
    """Too little of the task's execution time remains to start publishing."""


class LakeFSError(LakeFenceError):
    """A lakeFS call failed.

    :param message: a description naming the operation, never credentials.
    :param status: the HTTP status code, or ``None`` when no response arrived.
    :param operation: the logical operation that failed (e.g. ``create_branch``).
    :param server_message: lakeFS's own words, when it answered (never credentials).
    """

    def __init__(
        self, message: str, *, status: int | None = None, operation: str = "", server_message: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.operation = operation
        self.server_message = server_message


class LakeFSBadRequestError(LakeFSError):
    """lakeFS answered 400 (an invalid argument; the two common cases have their own classes)."""


class LakeFSNoChangesError(LakeFSBadRequestError):
    """lakeFS answered 400 "no changes": a commit with nothing to commit, or a merge that adds nothing."""


class LakeFSDirtyBranchError(LakeFSBadRequestError):
    """lakeFS answered 400 because the branch has uncommitted changes (a merge into it, a hard reset)."""


class LakeFSAuthError(LakeFSError):
    """lakeFS answered 401 or 403: wrong credentials or not permitted."""


class LakeFSNotFoundError(LakeFSError):
    """lakeFS answered 404: repository, branch, ref or object not found."""


class LakeFSRepositoryNotFoundError(LakeFSNotFoundError):
    """lakeFS answered 404 naming the repository: the server is lakeFS and the repository does not exist."""


class LakeFSConflictError(LakeFSError):
    """lakeFS answered 409: the entity exists already, or a merge conflicted."""


class LakeFSPreconditionFailedError(LakeFSError):
    """lakeFS answered 412: a precondition (If-None-Match, pre-merge hook) failed."""


class LakeFSUnavailableError(LakeFSError):
    """lakeFS answered 5xx or 429: possibly transient. A write's outcome is unknown."""


class LakeFSConnectionError(LakeFSUnavailableError):
    """No response from lakeFS (refused, reset, timed out). A write's outcome is unknown."""


# -- the hard fence and protected targets (docs/hard-fence.md) -----------------------------------


class LakeFSBranchProtectedError(LakeFSError):
    """lakeFS answered 403 because the branch is protected: it accepts merges (and reverts) only.

    Not an authentication problem: the credentials are fine, the operation is not allowed there.
    """


class LakeFSHookRejectedError(LakeFSPreconditionFailedError):
    """A pre-merge hook of the repository rejected the merge (lakeFS answered 412 naming a hook run).

    :param message: lakeFS's message (it quotes the hook's error).
    :param run_id: lakeFS's action run id (``lakectl actions runs describe``), if found.
    :param answer: the rest of lakeFS's answer, as :class:`LakeFSError` takes it.
    """

    def __init__(self, message: str, *, run_id: str | None = None, **answer: Unpack[_LakeFSAnswer]) -> None:
        super().__init__(message, **answer)
        self.run_id = run_id


class LakeFSHardFenceRejectedError(LakeFSHookRejectedError):
    """The hard fence refused the merge: the destination's HEAD was not the expected head.

    :param found_head: the HEAD lakeFS computed the merge against.
    :param expected_head: the head (or, for a scoped merge, the base) the merge named.
    :param version: the version of the hook that refused, when it says.
    :param scope_prefix: for a scoped merge, the declared prefix that changed since the expected base.
    :param path: for a scoped merge, one path that changed under it.
    """

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        found_head: str | None = None,
        expected_head: str | None = None,
        version: int | None = None,
        scope_prefix: str | None = None,
        path: str | None = None,
        **answer: Unpack[_LakeFSAnswer],
    ) -> None:
        super().__init__(message, run_id=run_id, **answer)
        self.found_head = found_head
        self.expected_head = expected_head
        self.version = version
        self.scope_prefix = scope_prefix
        self.path = path

    @property
    def scoped(self) -> bool:
        """Whether the fence refused a scoped merge because a commit since its base touched its scope."""
        return self.scope_prefix is not None


class HardFenceRaceError(PublishRaceError):
    """lakeFS's hard fence refused the publishing merge: the target moved after the fence read it.

    The fence lost a race: nothing was published, the target is as the other writer left it, the
    staging branch is kept as evidence.
    """


class MergeHookRejectedError(PublishFenceError):
    """A pre-merge hook of the repository (not the hard fence) rejected the publication.

    Nothing was published; the staging branch is kept so that the rejected output can be inspected.
    """


class HardFenceMissingError(InvalidInputError):
    """The hard fence is required but the input commit does not carry the current one (raised before the job)."""


class HardFenceInstallError(LakeFenceError):
    """The hard fence could not be installed (a foreign file in its place, or the branch kept moving)."""


class DeltaOutputModeError(InvalidInputError):
    """A declared Delta table root would be touched by file-level ``output_mode="replace"``.

    Raised before the job: replacing files under a table root deletes the log entries and data
    files the table's new version still references.
    """


class DeltaLogError(PublishFenceError):
    """The staged change under a Delta table root is not Delta commits appended on from the input.

    Raised before publishing; nothing was published and the staging branch is kept as evidence.

    :param message: what was found and what to do.
    :param staging_branch: the staging branch kept as evidence, if known.
    :param table_root: the declared table root the change was found under (``None`` for a change
        outside every declared root).
    """

    def __init__(self, message: str, *, staging_branch: str | None = None, table_root: str | None = None) -> None:
        super().__init__(message, staging_branch=staging_branch)
        self.table_root = table_root
