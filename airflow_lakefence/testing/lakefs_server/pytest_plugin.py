"""pytest plugin: a lakeFS for every test session, a fresh repository for every test.

Registered as the ``pytest11`` entry point ``lakefence``; without the installed package, add
``pytest_plugins = ["airflow_lakefence.testing.lakefs_server.pytest_plugin"]`` to a conftest.

Fixtures:

- ``lakefs_server`` (session): a :class:`LakeFSServerInfo`. A local server in a temporary
  directory, or the real lakeFS named by ``LAKEFENCE_TEST_LAKEFS_ENDPOINT``,
  ``LAKEFENCE_TEST_LAKEFS_ACCESS_KEY_ID`` and ``LAKEFENCE_TEST_LAKEFS_SECRET_ACCESS_KEY``
  (repositories then go under ``LAKEFENCE_TEST_STORAGE_NAMESPACE``).
- ``lakefs_client``: a ``lakefs.Client`` for that server.
- ``lakefs_repo``: a new ``lakefs.Repository`` (default branch ``main``), deleted afterwards.
- ``lakefs_controls``: the local server's controls, reset before and after the test; the test is
  skipped against a real lakeFS.

Marker ``lakefs_local_only``: skip the test against a real lakeFS (server-internal checks).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import lakefs

    from airflow_lakefence.testing.lakefs_server.controls import Controls

ENDPOINT_ENV = "LAKEFENCE_TEST_LAKEFS_ENDPOINT"
ACCESS_KEY_ENV = "LAKEFENCE_TEST_LAKEFS_ACCESS_KEY_ID"
SECRET_KEY_ENV = "LAKEFENCE_TEST_LAKEFS_SECRET_ACCESS_KEY"
NAMESPACE_ENV = "LAKEFENCE_TEST_STORAGE_NAMESPACE"
LOCAL_ONLY_MARKER = "lakefs_local_only"


@dataclass(frozen=True)
class LakeFSServerInfo:
    """Where the tests' lakeFS is and how to reach it.

    :param url: base URL without ``/api/v1``.
    :param access_key_id: access key id.
    :param secret_access_key: secret access key.
    :param storage_namespace: prefix for new repositories' storage namespaces.
    :param controls: the local server's test controls; ``None`` for a real lakeFS.
    """

    url: str
    access_key_id: str
    secret_access_key: str
    storage_namespace: str
    controls: Controls | None = None

    @property
    def endpoint(self) -> str:
        """The API endpoint, ``<url>/api/v1``."""
        return f"{self.url}/api/v1"

    @property
    def is_local(self) -> bool:
        """Whether this is the local test server (and not a real lakeFS)."""
        return self.controls is not None

    def client(self) -> lakefs.Client:
        """Return a new ``lakefs.Client`` for this server."""
        import lakefs

        client: lakefs.Client = lakefs.Client(  # type: ignore[no-untyped-call]
            host=self.url, username=self.access_key_id, password=self.secret_access_key
        )
        return client


def real_lakefs_configured() -> bool:
    """Return whether the environment points the tests at a real lakeFS."""
    return bool(os.environ.get(ENDPOINT_ENV))


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``lakefs_local_only`` marker."""
    config.addinivalue_line(
        "markers", f"{LOCAL_ONLY_MARKER}: needs the local lakeFS test server (skipped against a real lakeFS)"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip ``lakefs_local_only`` tests when a real lakeFS is configured."""
    if item.get_closest_marker(LOCAL_ONLY_MARKER) is not None and real_lakefs_configured():
        pytest.skip(f"server-internal check; {ENDPOINT_ENV} points at a real lakeFS")


@pytest.fixture(scope="session")
def lakefs_server() -> Iterator[LakeFSServerInfo]:
    """The session's lakeFS: the local test server, or a real one from the environment."""
    if real_lakefs_configured():
        url = os.environ[ENDPOINT_ENV].rstrip("/")
        url = url.removesuffix("/api/v1")
        key = os.environ.get(ACCESS_KEY_ENV)
        secret = os.environ.get(SECRET_KEY_ENV)
        if not key or not secret:
            raise pytest.UsageError(f"{ENDPOINT_ENV} needs {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}")
        yield LakeFSServerInfo(url, key, secret, os.environ.get(NAMESPACE_ENV, "local://lakefence-tests"))
        return
    # Imported here so that loading the plugin stays cheap for sessions that never use it.
    from airflow_lakefence.testing.lakefs_server import LakeFSServer

    with tempfile.TemporaryDirectory(prefix="lakefence-lakefs-") as data_dir, LakeFSServer(data_dir) as server:
        yield LakeFSServerInfo(
            server.url,
            server.access_key_id,
            server.secret_access_key,
            "local://lakefence-tests",
            server.controls,
        )


@pytest.fixture
def lakefs_client(lakefs_server: LakeFSServerInfo) -> lakefs.Client:
    """A ``lakefs.Client`` for the session's lakeFS."""
    return lakefs_server.client()


@pytest.fixture
def lakefs_repo(lakefs_server: LakeFSServerInfo, lakefs_client: lakefs.Client) -> Iterator[lakefs.Repository]:
    """A new repository with default branch ``main``, deleted after the test."""
    import lakefs
    from lakefs.exceptions import NotFoundException

    name = f"lakefence-{uuid.uuid4().hex[:16]}"
    namespace = f"{lakefs_server.storage_namespace.rstrip('/')}/{name}"
    repo = lakefs.Repository(name, client=lakefs_client).create(storage_namespace=namespace, default_branch="main")
    yield repo
    try:
        repo.delete()
    except NotFoundException:
        pass


@pytest.fixture
def lakefs_controls(lakefs_server: LakeFSServerInfo) -> Iterator[Controls]:
    """The local server's controls, reset before and after the test (skips on a real lakeFS)."""
    if lakefs_server.controls is None:
        pytest.skip("test controls exist only on the local lakeFS test server")
    controls = lakefs_server.controls
    controls.reset()
    yield controls
    controls.reset()

