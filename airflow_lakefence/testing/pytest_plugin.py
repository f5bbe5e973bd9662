"""Deprecated: ``-p lakefence_testing.pytest_plugin``.

A plugin of its own that loads the new one (so that a session naming both registers the fixtures
once) and lends its public names (``LakeFSServerInfo``, ``real_lakefs_unavailable``, ...).
"""

from __future__ import annotations

from typing import Any

from airflow_lakefence.testing import moved

_plugin = moved(__name__, "lakefence_testing.pytest_plugin")
pytest_plugins = ["lakefence_testing.pytest_plugin"]


def __getattr__(name: str) -> Any:
    if name.startswith("pytest_"):  # the hooks are the new plugin's, registered once
        raise AttributeError(name)
    return getattr(_plugin, name)
