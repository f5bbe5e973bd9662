"""Deprecated: the plugin's old place and fixture names, for one release.

Until now this module loaded into every pytest session through a ``pytest11`` entry point, with
fixtures named ``lakefs_backend``, ``lakefs_server``, ``lakefs_client``, ``lakefs_repo`` and
``lakefs_controls``. Nothing loads it any more: use ``-p airflow_lakefence.testing.pytest_plugin``
and the ``lakefence_*`` fixtures. A suite not yet moved can opt in here instead
(``-p airflow_lakefence.testing.lakefs_server.pytest_plugin``): it gets the plugin and the old
names, each warning when used.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

pytest_plugins = ["airflow_lakefence.testing.pytest_plugin"]


def _deprecated(old: str) -> None:
    new = old.replace("lakefs_", "lakefence_", 1)
    warnings.warn(
        f"the pytest fixture {old!r} is deprecated: use {new!r} (-p airflow_lakefence.testing.pytest_plugin)",
        DeprecationWarning,
        stacklevel=3,
    )


@pytest.fixture
def lakefs_backend(lakefence_backend: str) -> str:
    """Deprecated: ``lakefence_backend``."""
    _deprecated("lakefs_backend")
    return lakefence_backend


@pytest.fixture
def lakefs_server(lakefence_server: Any) -> Any:
    """Deprecated: ``lakefence_server``."""
    _deprecated("lakefs_server")
    return lakefence_server


@pytest.fixture
def lakefs_client(lakefence_client: Any) -> Any:
    """Deprecated: ``lakefence_client``."""
    _deprecated("lakefs_client")
    return lakefence_client


@pytest.fixture
def lakefs_repo(lakefence_repo: Any) -> Any:
    """Deprecated: ``lakefence_repo``."""
    _deprecated("lakefs_repo")
    return lakefence_repo


@pytest.fixture
def lakefs_controls(lakefence_controls: Any) -> Any:
    """Deprecated: ``lakefence_controls``."""
    _deprecated("lakefs_controls")
    return lakefence_controls
