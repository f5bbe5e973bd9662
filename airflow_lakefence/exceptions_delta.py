"""The errors of Delta Lake table outputs (docs/delta.md).

Kept apart from :mod:`airflow_lakefence.exceptions` for now; both classes derive from the package's
one root, :class:`~airflow_lakefence.exceptions.LakeFenceError`, through the existing classes a
DAG author already catches (:class:`InvalidInputError` before the job, :class:`PublishFenceError`
before publishing).
"""

from __future__ import annotations

from airflow_lakefence.exceptions import InvalidInputError, PublishFenceError

__all__ = ["DeltaLogError", "DeltaOutputModeError"]


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
