"""Fixtures of the reliability suite: the lakeFS server as a :class:`Lake`, the attempt launcher."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fresh_dag_module
from tests.reliability.harness import ForkServer, Lake, attempt_env


@pytest.fixture(scope="session")
def lake(lakefence_server: Any) -> Lake:
    """The session's lakeFS (the local server, or a real one from the environment)."""
    return Lake(
        lakefence_server.url,
        lakefence_server.access_key_id,
        lakefence_server.secret_access_key,
        lakefence_server.storage_namespace,
    )


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    """The Airflow home tests/conftest.py set up (configuration only: the drivers use no database)."""
    return Path(os.environ["AIRFLOW_HOME"])


@pytest.fixture(scope="session")
def launcher(lake: Lake, airflow_home: Path) -> Iterator[ForkServer]:
    """One fork server for the session: every attempt is a separate process forked from it."""
    server = ForkServer(attempt_env(lake, airflow_home))
    yield server
    server.close()


@pytest.fixture
def driver_env(lake: Lake, airflow_home: Path) -> dict[str, str]:
    """The environment of one attempt process."""
    return attempt_env(lake, airflow_home)


@pytest.fixture
def dags() -> Any:
    """tests/dags/reliability_dags.py, with the failures of earlier tests forgotten."""
    return fresh_dag_module("testdags/reliability_dags.py")
