"""A local lakeFS-compatible server for tests, importable without Airflow.

It serves the lakeFS REST API v1 (the part the ``lakefs`` and ``lakefs_sdk`` clients use) under
``/api/v1`` and stores metadata in SQLite and object bytes on disk. Test controls (request counts,
injected latency, scripted faults) are the fault-injecting proxy's
(:class:`lakefence_testing.proxy.FaultProxy` and :mod:`lakefence_testing.controls`), which works
in front of a real lakeFS too.

Example::

    from lakefence_testing.lakefs_server import LakeFSServer

    with LakeFSServer(tmp_path) as server:
        client = lakefs.Client(host=server.url, username=server.access_key_id,
                               password=server.secret_access_key)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakefence_testing.lakefs_server._server import (
        DEFAULT_ACCESS_KEY_ID,
        DEFAULT_SECRET_ACCESS_KEY,
        LakeFSServer,
        run_server,
    )

# Loaded on first use: importing the package stays cheap, and a missing werkzeug names the extra.
_EXPORTS = {
    "DEFAULT_ACCESS_KEY_ID": "_server",
    "DEFAULT_SECRET_ACCESS_KEY": "_server",
    "LakeFSServer": "_server",
    "run_server": "_server",
}

__all__ = [
    "DEFAULT_ACCESS_KEY_ID",
    "DEFAULT_SECRET_ACCESS_KEY",
    "LakeFSServer",
    "run_server",
]


#: Third-party modules of the ``testing`` extra the server needs.
_TESTING_EXTRA = {"werkzeug", "lupa"}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in _TESTING_EXTRA:
            raise
        raise ModuleNotFoundError(
            f"the local lakeFS server needs {missing!r}, which comes with the testing extra: "
            "pip install 'airflow-provider-lakefence[testing]'",
            name=missing,
        ) from exc
    return getattr(module, name)
