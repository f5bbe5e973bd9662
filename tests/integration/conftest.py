"""Fixtures shared by the integration tests: the test DAG modules and a seeded repository."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from typing import Any

import lakefs
import pytest
from lakefs.exceptions import NotFoundException

from tests.conftest import fresh_dag_module, load_dag_module
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


def _forget_example_modules() -> None:
    for name in [m for m in sys.modules if m.startswith("lakefence_dag_examples_")]:
        del sys.modules[name]


@pytest.fixture
def example_repository(lakefence_client: lakefs.Client, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A repository name of the test's own for the example DAGs (``LAKEFENCE_EXAMPLE_REPOSITORY``, read
    when an example module is imported: the examples are imported afresh), deleted after the test.

    Not one ``example-repo`` deleted and created again by each test: lakeFS keeps a repository's record
    in a cache for 5 to 7 s (``graveler.repository_cache``), so a repository created again under a name
    just deleted is answered from the deleted one's record ("branch 'main' not found").
    """
    name = f"example-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("LAKEFENCE_EXAMPLE_REPOSITORY", name)
    _forget_example_modules()
    yield name
    _forget_example_modules()
    try:
        lakefs.Repository(name, client=lakefence_client).delete()
    except NotFoundException:
        pass
