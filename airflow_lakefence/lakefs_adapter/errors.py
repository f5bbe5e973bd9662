"""lakeFS's answers translated into the package's exception tree, once, for the client adapter.

:func:`translate_error` is the one place that reads lakeFS's status codes and messages: above
:mod:`airflow_lakefence.lakefs_adapter.client` every answer is an exception class of
:mod:`airflow_lakefence.exceptions`, and nothing sorts errors by their text. The answers lakeFS
tells apart only in its message get their own classes here: "no changes" and a dirty branch (both
400), a protected branch (403), a missing repository (404), a pre-merge hook's rejection and the
hard fence's own (412). Every translated error carries the server's own words in
:attr:`~airflow_lakefence.exceptions.LakeFSError.server_message`. :func:`transport_cause` names
what failed below a "no response" error (refused, timed out, TLS), for the connection test.
"""

from __future__ import annotations

import urllib3
from lakefs.exceptions import LakeFSException, ServerException
from lakefs_sdk.exceptions import ApiException, OpenApiException

from airflow_lakefence.core.fences.hard import RejectionKind, classify_rejection
from airflow_lakefence.exceptions import (
    LakeFSAuthError,
    LakeFSBadRequestError,
    LakeFSBranchProtectedError,
    LakeFSConflictError,
    LakeFSConnectionError,
    LakeFSDirtyBranchError,
    LakeFSError,
    LakeFSHardFenceRejectedError,
    LakeFSHookRejectedError,
    LakeFSNoChangesError,
    LakeFSNotFoundError,
    LakeFSPreconditionFailedError,
    LakeFSRepositoryNotFoundError,
    LakeFSUnavailableError,
)

__all__ = ["CAUGHT", "translate_error", "transport_cause"]

_STATUS_TO_ERROR: dict[int, type[LakeFSError]] = {
    400: LakeFSBadRequestError,
    401: LakeFSAuthError,
    403: LakeFSAuthError,
    404: LakeFSNotFoundError,
    409: LakeFSConflictError,
    412: LakeFSPreconditionFailedError,
    429: LakeFSUnavailableError,
}

# Transport failures below the SDK: no HTTP response arrived.
_TRANSPORT_ERRORS: tuple[type[Exception], ...] = (urllib3.exceptions.HTTPError, OSError)
#: Everything the client adapter translates.
CAUGHT: tuple[type[Exception], ...] = (LakeFSException, OpenApiException, *_TRANSPORT_ERRORS)


def _error_message(exc: LakeFSException) -> str:
    if isinstance(exc, ServerException):
        body = exc.body if isinstance(exc.body, dict) else {}
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
        return exc.reason or type(exc).__name__
    return type(exc).__name__


def _special_error(status: int | None, message: str, operation: str, what: str) -> LakeFSError | None:
    """The answers lakeFS tells apart only in its message, each its own class."""
    text = f"lakeFS {operation} on {what} failed ({status}): {message}"
    lowered = message.lower()
    if status == 400 and "no changes" in lowered:
        return LakeFSNoChangesError(text, status=status, operation=operation, server_message=message)
    if status == 400 and "dirty" in lowered:
        return LakeFSDirtyBranchError(text, status=status, operation=operation, server_message=message)
    if status == 403 and "protected branch" in message:
        return LakeFSBranchProtectedError(
            f"lakeFS {operation} on {what} refused: the branch is protected (only merges are allowed): {message}",
            status=status,
            operation=operation,
            server_message=message,
        )
    if status == 404 and "repository" in lowered:
        return LakeFSRepositoryNotFoundError(text, status=status, operation=operation, server_message=message)
    if status == 412 and "hook" in message:
        rejection = classify_rejection(message)
        if rejection.kind is RejectionKind.HARD_FENCE:
            return LakeFSHardFenceRejectedError(
                text,
                status=status,
                operation=operation,
                server_message=message,
                run_id=rejection.run_id,
                found_head=rejection.found_head,
                expected_head=rejection.expected_head,
                version=rejection.version,
                scope_prefix=rejection.scope_prefix,
                path=rejection.path,
            )
        return LakeFSHookRejectedError(
            text, status=status, operation=operation, server_message=message, run_id=rejection.run_id
        )
    return None


def translate_error(exc: BaseException, operation: str, what: str) -> LakeFSError:
    """Translate an SDK or transport exception into the package's tree.

    :param exc: the exception raised by the SDK or urllib3.
    :param operation: the logical operation (e.g. ``merge``).
    :param what: the entity it concerned (repository/branch/ref), for the message.
    :return: the translated exception (the caller raises it ``from exc``).
    """
    if isinstance(exc, LakeFSError):
        return exc
    if isinstance(exc, ServerException):
        status, message = exc.status_code, _error_message(exc)
        special = _special_error(status, message, operation, what)
        if special is not None:
            return special
        cls = _STATUS_TO_ERROR.get(status or 0)
        if cls is None:
            cls = LakeFSUnavailableError if status is None or status >= 500 else LakeFSError
        return cls(
            f"lakeFS {operation} on {what} failed ({status}): {message}",
            status=status,
            operation=operation,
            server_message=message,
        )
    if isinstance(exc, LakeFSException):
        # Client-side SDK errors (no credentials configured, transaction misuse...): no status.
        return LakeFSError(f"lakeFS {operation} on {what} failed: {type(exc).__name__}", operation=operation)
    if isinstance(exc, ApiException):
        return translate_error(ServerException(exc.status, exc.reason, exc.body), operation, what)  # type: ignore[no-untyped-call]
    if isinstance(exc, OpenApiException):
        return LakeFSError(f"lakeFS {operation} on {what}: invalid request ({type(exc).__name__})", operation=operation)
    if isinstance(exc, _TRANSPORT_ERRORS):
        return LakeFSConnectionError(
            f"lakeFS {operation} on {what}: no response ({type(exc).__name__})", operation=operation
        )
    return LakeFSError(f"lakeFS {operation} on {what} failed: {type(exc).__name__}", operation=operation)


def transport_cause(exc: BaseException) -> str:
    """Name the transport failure below a translated "no response" error, with what to check.

    :param exc: a :class:`~airflow_lakefence.exceptions.LakeFSConnectionError` (its cause chain is read).
    """
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        reason = getattr(seen, "reason", None)
        seen = reason if isinstance(reason, BaseException) else (seen.__cause__ or seen.__context__)
    text = " ".join(f"{type(e).__name__}: {e}" for e in chain).lower()
    if "certificate" in text or "ssl" in text:
        return (
            "the TLS handshake failed (certificate not trusted?); fix the certificate, or switch "
            "'Verify TLS' off only for a test server with a self-signed certificate"
        )
    if "refused" in text:
        return "connection refused: nothing listens on that port; check the host and port, and that lakeFS runs"
    if "timed out" in text or "timeout" in text:
        return "no answer before the timeout; check the host, port, firewall and the 'timeout' extra"
    if "name or service not known" in text or "nodename" in text or "resolution" in text or "getaddrinfo" in text:
        return "the host name does not resolve; check the endpoint URL"
    return f"no response ({chain[-1].__class__.__name__}); check the host and port, and that lakeFS runs"
