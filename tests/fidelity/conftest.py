"""Fixtures of the differential fidelity test: both backends at once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lakefence_testing.pytest_plugin import real_lakefs_unavailable
from tests.fidelity._backends import local_server, real_lakefs
from tests.fidelity._harness import Server
from tests.tools.real_lakefs import GoToolchainMissingError, ensure_lakefs_binary


@pytest.fixture(scope="session")
def fidelity_servers() -> Iterator[list[Server]]:
    """A real lakeFS (the reference) and the local server, each fresh for the session.

    Without real lakeFS (no Go toolchain) the test is skipped, and fails on CI (``CI=true``):
    the same rule as the plugin's ``real`` backend.
    """
    try:
        binary = ensure_lakefs_binary()
    except GoToolchainMissingError as exc:
        real_lakefs_unavailable(str(exc))
    with real_lakefs(binary) as real, local_server() as local:
        yield [Server(real), Server(local)]
