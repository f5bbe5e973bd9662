"""Fixtures for the hard-fence tests: a lakeFS that runs pre-merge hooks, the adapter, a fenced repository.

The tests need a lakeFS that runs actions (Lua pre-merge hooks). Both backends do: real lakeFS, and
the local test server, which runs pre-merge Lua hooks with a real Lua interpreter (``lupa``, in the
``testing`` extra; airflow_lakefence/testing/lakefs_server/_actions.py). Nothing here is skipped on
either backend: without ``lupa`` the local server fails such a merge with a message saying so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import lakefs
import pytest

from airflow_lakefence.hardfence import install_hard_fence
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from airflow_lakefence.testing.pytest_plugin import LakeFSServerInfo

T = TypeVar("T")


class CountingClient(LakeFSClient):
    """The real adapter, counting its logical lakeFS calls by operation (a listing page is one call)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: Counter[str] = Counter()

    def _call(self, operation: str, what: str, fn: Callable[[], T], *, idempotent: bool) -> T:
        self.calls[operation] += 1
        return super()._call(operation, what, fn, idempotent=idempotent)


@pytest.fixture
def adapter(lakefence_server: LakeFSServerInfo) -> CountingClient:
    """The product's lakeFS adapter for the session's server, counting calls."""
    return CountingClient(lakefence_server.url, lakefence_server.access_key_id, lakefence_server.secret_access_key)


@pytest.fixture
def fenced_repo(lakefence_repo: lakefs.Repository, adapter: CountingClient) -> Iterator[lakefs.Repository]:
    """A repository whose ``main`` carries the hard fence (and one data file)."""
    main = lakefence_repo.branch("main")
    main.object("data/seed.txt").upload(b"seed\n")
    main.commit("seed")
    install_hard_fence(adapter, lakefence_repo.id, "main")
    adapter.calls.clear()
    yield lakefence_repo
