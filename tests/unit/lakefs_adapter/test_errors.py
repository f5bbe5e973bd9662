"""Every SDK and transport exception is translated into the package's tree at the adapter."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import lakefs.exceptions
import lakefs_sdk.exceptions
import pytest
import urllib3

from airflow_lakefence import exceptions as exc_mod
from airflow_lakefence.exceptions import (
    LakeFenceError,
    LakeFSAuthError,
    LakeFSBadRequestError,
    LakeFSConflictError,
    LakeFSConnectionError,
    LakeFSDirtyBranchError,
    LakeFSError,
    LakeFSNoChangesError,
    LakeFSNotFoundError,
    LakeFSPreconditionFailedError,
    LakeFSRepositoryNotFoundError,
    LakeFSUnavailableError,
)
from airflow_lakefence.lakefs_adapter.client import translate_error

SECRET = "s3cr3t-value-never-shown"


def _subclasses(root: type) -> list[type]:
    seen: list[type] = []
    stack = [root]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.append(sub)
                stack.append(sub)
    return [root, *seen]


def _instantiate(cls: type) -> BaseException:
    if issubclass(cls, lakefs.exceptions.ServerException):
        return cls(500, "reason", json.dumps({"message": "server says no"}), {"Authorization": SECRET})
    if issubclass(cls, lakefs_sdk.exceptions.ApiException):
        return cls(status=503, reason="unavailable")
    return cls("message")


SDK_CLASSES = [
    c
    for c in _subclasses(lakefs.exceptions.LakeFSException) + _subclasses(lakefs_sdk.exceptions.OpenApiException)
    if c.__module__.startswith(("lakefs", "lakefs_sdk"))
]


@pytest.mark.parametrize("cls", SDK_CLASSES, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_sdk_exception_is_mapped(cls: type) -> None:
    translated = translate_error(_instantiate(cls), "op", "thing")
    assert isinstance(translated, LakeFSError)
    assert translated.operation == "op"
    assert SECRET not in str(translated)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, LakeFSBadRequestError),
        (401, LakeFSAuthError),
        (403, LakeFSAuthError),
        (404, LakeFSNotFoundError),
        (409, LakeFSConflictError),
        (412, LakeFSPreconditionFailedError),
        (429, LakeFSUnavailableError),
        (500, LakeFSUnavailableError),
        (503, LakeFSUnavailableError),
        (418, LakeFSError),
    ],
)
def test_status_mapping(status: int, expected: type) -> None:
    server_exc = lakefs.exceptions.ServerException(status, "r", json.dumps({"message": "msg"}))
    translated = translate_error(server_exc, "merge", "x")
    assert type(translated) is expected
    assert translated.status == status
    assert "msg" in str(translated)


@pytest.mark.parametrize(
    "transport",
    [
        urllib3.exceptions.MaxRetryError(None, "/x", reason=ConnectionRefusedError()),  # type: ignore[arg-type]
        urllib3.exceptions.ProtocolError("Connection aborted."),
        urllib3.exceptions.ReadTimeoutError(None, "/x", "timed out"),  # type: ignore[arg-type]
        ConnectionResetError(),
    ],
)
def test_transport_errors_are_unavailable(transport: BaseException) -> None:
    translated = translate_error(transport, "commit", "x")
    assert isinstance(translated, LakeFSConnectionError)
    assert isinstance(translated, LakeFSUnavailableError)
    assert translated.status is None


@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        (400, "commit: no changes", LakeFSNoChangesError),
        (400, "no changes", LakeFSNoChangesError),
        (400, "main: uncommitted changes (dirty branch)", LakeFSDirtyBranchError),
        (400, "invalid value: name", LakeFSBadRequestError),
        (404, "repository not found", LakeFSRepositoryNotFoundError),
        (404, "not found", LakeFSNotFoundError),
    ],
)
def test_answers_told_apart_only_by_their_message_get_their_own_class(
    status: int, message: str, expected: type
) -> None:
    """The one place that reads lakeFS's words: above the adapter, the class says it all."""
    server_exc = lakefs.exceptions.ServerException(status, "r", json.dumps({"message": message}))
    translated = translate_error(server_exc, "merge", "x")
    assert type(translated) is expected
    assert translated.server_message == message
    assert isinstance(translated, LakeFSBadRequestError if status == 400 else LakeFSNotFoundError)


def test_every_exception_class_of_the_package_is_in_exceptions_py() -> None:
    """The local lakeFS server's HTTP answer and the proxy's internal signal are lakefence_testing's,
    a package of its own beside this one."""
    package = Path(exc_mod.__file__).parent
    allowed: set[tuple[str, str]] = set()
    elsewhere = []
    for path in package.rglob("*.py"):
        relative = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef) or relative == "exceptions.py":
                continue
            bases = [ast.unparse(base) for base in node.bases]
            if any(base.endswith(("Error", "Exception")) for base in bases):
                if (relative, node.name) not in allowed:
                    elsewhere.append(f"{relative}:{node.name}")
    assert elsewhere == []


def test_the_docstring_draws_every_class() -> None:
    tree = exc_mod.__doc__ or ""
    assert [name for name in exc_mod.__all__ if f" {name}" not in tree] == []


def test_one_root() -> None:
    for _name, cls in inspect.getmembers(exc_mod, inspect.isclass):
        if cls.__module__ == exc_mod.__name__:
            assert issubclass(cls, LakeFenceError)
