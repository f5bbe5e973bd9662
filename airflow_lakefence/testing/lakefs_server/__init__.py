"""Deprecated: :mod:`lakefence_testing.lakefs_server`; the test controls (``Controls``, ``Fault``,
``RemoteControls``) are :mod:`lakefence_testing.controls`."""

from __future__ import annotations

import importlib
from typing import Any

from airflow_lakefence.testing import moved

_server = moved(__name__, "lakefence_testing.lakefs_server")
_CONTROLS = ("Controls", "Fault", "RemoteControls")

__all__ = [*_server.__all__, *_CONTROLS]


def __getattr__(name: str) -> Any:
    if name in _CONTROLS:
        return getattr(importlib.import_module("lakefence_testing.controls"), name)
    return getattr(_server, name)
