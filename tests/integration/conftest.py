"""Fixtures shared by the integration tests: the test DAG modules and a seeded repository."""

from __future__ import annotations

from typing import Any

import lakefs
import pytest

from tests.conftest import fresh_dag_module, load_dag_module
from tests.integration.helpers import commit_files


@pytest.fixture
def dags() -> Any:
    """tests/dags/fenced_test_dags.py, with the failures of earlier tests forgotten."""
    return fresh_dag_module("testdags/fenced_test_dags.py")


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
