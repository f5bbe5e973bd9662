"""Fixtures of the differential fidelity test: both backends at once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_lakefence.testing.real_lakefs import GoToolchainMissingError
from tests.fidelity._backends import local_server, real_lakefs
from tests.fidelity._harness import Server


@pytest.fixture(scope="session")
def fidelity_servers() -> Iterator[list[Server]]:
    """A real lakeFS (the reference) and the local server, each fresh for the session."""
    try:
        with real_lakefs() as real, local_server() as local:
            yield [Server(real), Server(local)]
    except GoToolchainMissingError as exc:
        pytest.skip(f"no real lakeFS: {exc}")
