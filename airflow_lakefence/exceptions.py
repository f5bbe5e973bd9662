"""The package's exception tree.

Every failure the package raises derives from :class:`LakeFenceError`, so a DAG author can catch
one root. lakeFS SDK and HTTP errors are translated into :class:`LakeFSError` subclasses at the
adapter boundary (:mod:`airflow_lakefence.lakefs_client`); no SDK exception leaks past it.

Messages never contain credentials: they name the repository, branch, ref and operation only.
"""

from __future__ import annotations

__all__ = [
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
    "LakeFSError",
    "LakeFSHardFenceRejectedError",
    "LakeFSHookRejectedError",
    "LakeFSNotFoundError",
    "LakeFSPreconditionFailedError",
    "LakeFSUnavailableError",
    "LakeFenceError",
    "MergeHookRejectedError",
    "OutputPrefixError",
    "PublishBudgetError",
    "PublishFenceError",
    "PublishRaceError",
    "S3AConfigError",
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


class S3AConfigError(InvalidInputError):
    """The S3A set-up cannot work: no hadoop-aws, or one that does not match Spark's Hadoop."""


class WorkspaceError(LakeFenceError):
    """The workspace directory is missing, unreadable or not what the write mode expects."""


class JobError(LakeFenceError):
    """The attempt's job (a Spark application, a Python function) failed; nothing was staged or published."""


class JobEnvironmentError(LakeFenceError, RuntimeError):
    """Raised inside a job: its environment lacks what the operator passes (locations, credentials, S3A)."""


class SparkJobError(JobError):
    """The Spark job failed; nothing was staged or published."""


class StaleAttemptError(LakeFenceError):
    """This process is no longer the current Airflow attempt of its task; nothing more is written."""


class PublishFenceError(LakeFenceError):
    """The target branch is in a state the protocol cannot explain; the publish failed closed.

    :param message: what was found.
    :param staging_branch: the staging branch kept as evidence, if any.
    """

    def __init__(self, message: str, *, staging_branch: str | None = None) -> None:
        super().__init__(message)
        self.staging_branch = staging_branch


class OutputPrefixError(PublishFenceError):
    """The attempt changed paths outside the declared ``output_prefixes``; nothing was published."""


class PublishRaceError(PublishFenceError):
    """Verification after acting found that another writer raced the publish.

    The target branch is left as it is (never "fixed" silently) and the staging branch is kept.
    """


class PublishBudgetError(LakeFenceError):
    """Too little of the task's execution time remains to start publishing."""


class LakeFSError(LakeFenceError):
    """A lakeFS call failed.

    :param message: a description naming the operation, never credentials.
    :param status: the HTTP status code, or ``None`` when no response arrived.
    :param operation: the logical operation that failed (e.g. ``create_branch``).
    """

    def __init__(self, message: str, *, status: int | None = None, operation: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.operation = operation


class LakeFSBadRequestError(LakeFSError):
    """lakeFS answered 400 (invalid argument, no changes, dirty branch...)."""


class LakeFSAuthError(LakeFSError):
    """lakeFS answered 401 or 403: wrong credentials or not permitted."""


class LakeFSNotFoundError(LakeFSError):
    """lakeFS answered 404: repository, branch, ref or object not found."""


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
    """

    def __init__(
        self, message: str, *, status: int | None = None, operation: str = "", run_id: str | None = None
    ) -> None:
        super().__init__(message, status=status, operation=operation)
        self.run_id = run_id


class LakeFSHardFenceRejectedError(LakeFSHookRejectedError):
    """The hard fence refused the merge: the destination's HEAD was not the expected head.

    :param found_head: the HEAD lakeFS computed the merge against.
    :param expected_head: the head the merge named.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        operation: str = "",
        run_id: str | None = None,
        found_head: str | None = None,
        expected_head: str | None = None,
    ) -> None:
        super().__init__(message, status=status, operation=operation, run_id=run_id)
        self.found_head = found_head
        self.expected_head = expected_head


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
