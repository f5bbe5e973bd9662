"""The two backends of the differential test, started side by side for one session.

The real lakeFS comes from the project's launcher (:mod:`tests.tools.real_lakefs`,
the same one the ``--lakefs-backend=real`` fixtures use); the local server runs in-process.
Both record the committer ``admin``. No proxy sits in front: the test compares the servers'
own answers.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lakefence_testing.lakefs_server import DEFAULT_ACCESS_KEY_ID, DEFAULT_SECRET_ACCESS_KEY, LakeFSServer
from tests.tools.real_lakefs import RealLakeFS, ensure_lakefs_binary

USER_NAME = "admin"


@dataclass(frozen=True)
class Endpoint:
    """A lakeFS API: base URL (without ``/api/v1``) and credentials."""

    name: str
    url: str
    access_key_id: str = DEFAULT_ACCESS_KEY_ID
    secret_access_key: str = DEFAULT_SECRET_ACCESS_KEY


# lakeFS v1.86's cherry-pick alters the picked commit's record in its commit cache (the metadata
# map is shared), after which the commit's id no longer resolves and logs through it fail until
# the entry expires (10 minutes by default). The reference instance runs with entries expiring
# at once, so that the comparison is with lakeFS's stored state rather than with that bug.
_REAL_ENV = {"LAKEFS_GRAVELER_COMMIT_CACHE_EXPIRY": "1ns", "LAKEFS_GRAVELER_COMMIT_CACHE_JITTER": "1ns"}


@contextmanager
def real_lakefs(binary: Path | None = None) -> Iterator[Endpoint]:
    """Run a real lakeFS (built or cached by the project's launcher) in a temporary directory.

    :param binary: the lakeFS binary; by default the launcher's (:func:`ensure_lakefs_binary`).
    :raises GoToolchainMissingError: without a binary, a cached one or ``go``.
    """
    root = tempfile.mkdtemp(prefix="lakefence-fidelity-real-")
    saved = {key: os.environ.get(key) for key in _REAL_ENV}
    try:
        # The launcher passes this process's environment on to lakeFS.
        os.environ.update(_REAL_ENV)
        real = RealLakeFS(binary or ensure_lakefs_binary(), root, log_level="ERROR").start()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    try:
        yield Endpoint("real", real.url, real.access_key_id, real.secret_access_key)
    finally:
        real.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def local_server() -> Iterator[Endpoint]:
    """Run the local lakeFS server in a temporary directory until the context ends."""
    root = tempfile.mkdtemp(prefix="lakefence-fidelity-local-")
    try:
        with LakeFSServer(root, committer=USER_NAME) as server:
            yield Endpoint("local", server.url, server.access_key_id, server.secret_access_key)
    finally:
        shutil.rmtree(root, ignore_errors=True)
