"""Errors raised by the store and turned into lakeFS-shaped HTTP responses."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class ApiError(Exception):
    """An error with the HTTP status lakeFS answers for it.

    :param status: HTTP status code.
    :param message: text for the ``{"message": ...}`` body.
    :param body: a full JSON body to send instead of ``{"message": ...}``.
    """

    def __init__(self, status: int, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.body = body if body is not None else {"message": message}


def bad_request(message: str) -> ApiError:
    """Return a 400 error (lakeFS: ErrInvalidValue, ErrNoChanges, ErrDirtyBranch, ...)."""
    return ApiError(400, message)


def not_found(message: str) -> ApiError:
    """Return a 404 error (lakeFS: ErrNotFound and its wrappers)."""
    return ApiError(404, message)


def conflict(message: str) -> ApiError:
    """Return a 409 error (lakeFS: ErrNotUnique, ErrConflictFound)."""
    return ApiError(409, message)


def forbidden(message: str) -> ApiError:
    """Return a 403 error (lakeFS: ErrDeleteDefaultBranch, ErrReadOnlyRepository)."""
    return ApiError(403, message)


def merge_conflict() -> ApiError:
    """Return the 409 lakeFS sends for a merge conflict: a MergeResult with an empty reference."""
    return ApiError(409, "conflict found", body={"reference": ""})


def no_changes(operation: str) -> ApiError:
    """Return the 400 lakeFS sends when an operation would change nothing."""
    return ApiError(400, f"{operation}: no changes")


def dirty_branch(branch: str) -> ApiError:
    """Return the 400 lakeFS sends when a branch with uncommitted changes must be clean."""
    return ApiError(400, f"{branch}: uncommitted changes (dirty branch)")


def not_implemented() -> ApiError:
    """Return the 501 open-source lakeFS sends for unsupported preconditions."""
    return ApiError(501, "Not Implemented")


@contextmanager
def context(prefix: str) -> Iterator[None]:
    """Prefix the message of an :class:`ApiError` raised inside, as lakeFS wraps its errors.

    Errors with a custom body (a merge conflict) pass through unchanged.

    :param prefix: text put before ``": <message>"``.
    """
    try:
        yield
    except ApiError as exc:
        if exc.body != {"message": exc.message} or not prefix:
            raise
        raise ApiError(exc.status, f"{prefix}: {exc.message}") from exc


def run_id() -> str:
    """Return a new hook run id shaped like lakeFS's (20 lower-case base32hex characters)."""
    return base64.b32hexencode(os.urandom(12)).decode("ascii").lower()[:20]
