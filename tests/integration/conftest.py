"""Fixtures shared by the integration tests: the test DAG modules, a seeded repository, and for the hard
fence a lakeFS that runs pre-merge hooks, the counting adapter and a fenced repository.

The hard-fence tests need a lakeFS that runs actions (Lua pre-merge hooks). Both backends do: real
lakeFS, and the local test server, which runs pre-merge Lua hooks with a real Lua interpreter
(``lupa``, in the ``testing`` extra). Nothing is skipped on either backend: without ``lupa`` the
local server fails such a merge with a message saying so.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lakefs
import pytest

from airflow_lakefence.hardfence import install_hard_fence
from lakefence_testing.pytest_plugin import LakeFSServerInfo
from tests.conftest import fresh_dag_module, load_dag_module
from tests.integration.hard_fence_helpers import CountingClient
from tests.integration.helpers import commit_files


@pytest.fixture
def dags() -> Any:
    """tests/dags/fenced_test_dags.py, with the failures of earlier tests forgotten."""
    return fresh_dag_module("testdags/fenced_test_dags.py")


@pytest.fixture
def cost_dags() -> Iterator[Any]:
    """tests/dags/cost_dags.py (the cost tests), earlier failures forgotten; its probe unset after the test."""
    module = fresh_dag_module("testdags/cost_dags.py")
    yield module
    module.PROBE["try_start"] = None


@pytest.fixture
def publishers(dags: Any) -> Any:
    """The fenced test DAGs, named for the tests where they are the publishing side."""
    return dags


@pytest.fixture
def sensors() -> Any:
    """tests/dags/sensor_test_dags.py (sensors and the cleaner)."""
    return load_dag_module("testdags/sensor_test_dags.py")


@pytest.fixture
def cleaners(sensors: Any) -> Any:
    """The sensor test DAGs, named for the cleaner tests."""
    return sensors


@pytest.fixture
def seeded(lakefence_repo: lakefs.Repository) -> tuple[lakefs.Repository, str]:
    """A repository whose ``main`` holds one input commit; returns (repo, input commit id)."""
    return lakefence_repo, commit_files(lakefence_repo, "main", {"in/data.txt": "input"}, "seed input")


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
