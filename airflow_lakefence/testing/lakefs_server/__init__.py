"""A local lakeFS-compatible server for tests, importable without Airflow.

It serves the lakeFS REST API v1 (the part the ``lakefs`` and ``lakefs_sdk`` clients use) under
``/api/v1``, stores metadata in SQLite and object bytes on disk, and adds test controls under
``/_lakefence/``: request counts, injected latency and scripted faults.

Example::

    from airflow_lakefence.testing.lakefs_server import LakeFSServer

    with LakeFSServer(tmp_path) as server:
        client = lakefs.Client(host=server.url, username=server.access_key_id,
                               password=server.secret_access_key)
"""

from airflow_lakefence.testing.lakefs_server._server import (
    DEFAULT_ACCESS_KEY_ID,
    DEFAULT_SECRET_ACCESS_KEY,
    LakeFSServer,
    run_server,
)
from airflow_lakefence.testing.lakefs_server.controls import (
    Controls,
    Fault,
    RemoteControls,
)

__all__ = [
    "DEFAULT_ACCESS_KEY_ID",
    "DEFAULT_SECRET_ACCESS_KEY",
    "Controls",
    "Fault",
    "LakeFSServer",
    "RemoteControls",
    "run_server",
]
