"""Fixtures for the hard-fence tests: a lakeFS that runs pre-merge hooks, the adapter, a fenced repository.

The tests need a lakeFS that runs actions (Lua pre-merge hooks). Real lakeFS does; the local test
server is skipped until it runs them too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import lakefs
import pytest

from airflow_lakefence.hardfence import install_hard_fence
from airflow_lakefence.lakefs_client import LakeFSClient
from airflow_lakefence.testing.lakefs_server.pytest_plugin import LakeFSServerInfo

T = TypeVar("T")


def local_server_runs_actions() -> bool:
    """Whether the local test server runs lakeFS actions (pre-merge Lua hooks)."""
    try:
        from airflow_lakefence.testing.lakefs_server import _actions  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture
def hooks_server(lakefs_server: LakeFSServerInfo) -> LakeFSServerInfo:
    """The session's lakeFS, when it runs pre-merge hooks (skips otherwise)."""
    if lakefs_server.is_local and not local_server_runs_actions():
        pytest.skip("the local lakeFS test server does not run actions (pre-merge hooks)")
    return lakefs_server


class CountingClient(LakeFSClient):
    """The real adapter, counting its logical lakeFS calls by operation (a listing page is one call)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: Counter[str] = Counter()

    def _call(self, operation: str, what: str, fn: Callable[[], T], *, idempotent: bool) -> T:
        self.calls[operation] += 1
        return super()._call(operation, what, fn, idempotent=idempotent)


@pytest.fixture
def adapter(hooks_server: LakeFSServerInfo) -> CountingClient:
    """The product's lakeFS adapter for the session's server, counting calls."""
    return CountingClient(hooks_server.url, hooks_server.access_key_id, hooks_server.secret_access_key)


@pytest.fixture
def fenced_repo(
    hooks_server: LakeFSServerInfo, lakefs_repo: lakefs.Repository, adapter: CountingClient
) -> Iterator[lakefs.Repository]:
    """A repository whose ``main`` carries the hard fence (and one data file)."""
    main = lakefs_repo.branch("main")
    main.object("data/seed.txt").upload(b"seed\n")
    main.commit("seed")
    install_hard_fence(adapter, lakefs_repo.id, "main")
    adapter.calls.clear()
    yield lakefs_repo
