"""pytest plugin: a lakeFS for every test session (local server or real lakeFS), a fresh repository per test.

Registered as the ``pytest11`` entry point ``lakefence``; without the installed package, add
``pytest_plugins = ["airflow_lakefence.testing.lakefs_server.pytest_plugin"]`` to a conftest.

Backends (option ``--lakefs-backend=local|real|both``, or ``LAKEFENCE_TEST_LAKEFS_BACKEND``;
default ``local``, or ``real`` when ``LAKEFENCE_TEST_LAKEFS_ENDPOINT`` is set):

- ``local``: the package's lakeFS-compatible server, in-process, in a temporary directory.
- ``real``: a real lakeFS. The one named by ``LAKEFENCE_TEST_LAKEFS_ENDPOINT``,
  ``LAKEFENCE_TEST_LAKEFS_ACCESS_KEY_ID`` and ``LAKEFENCE_TEST_LAKEFS_SECRET_ACCESS_KEY``
  (repositories under ``LAKEFENCE_TEST_STORAGE_NAMESPACE``), else one built from its Go module
  and started for the session (:mod:`airflow_lakefence.testing.real_lakefs`). Without a Go
  toolchain the real backend's tests are skipped with the reason; with ``CI=true`` they fail.
- ``both``: every test using these fixtures runs once per backend; its id names the backend
  (``test_x[local]``, ``test_x[real]``). Each backend's server starts once per session.

Either backend sits behind a fault-injecting proxy (:mod:`airflow_lakefence.testing.proxy`):
the fixtures' URL is the proxy's, so request counts, latency and faults work on both.

Fixtures:

- ``lakefs_backend`` (session): ``"local"`` or ``"real"``.
- ``lakefs_server`` (session): a :class:`LakeFSServerInfo`.
- ``lakefs_client``: a ``lakefs.Client`` for that server.
- ``lakefs_repo``: a new ``lakefs.Repository`` (default branch ``main``), deleted afterwards.
- ``lakefs_controls``: the proxy's controls (counts, latency, faults, hooks), reset before and
  after the test.

Markers:

- ``real_lakefs``: needs real lakeFS (skipped on the local backend).
- ``lakefs_local_only``: needs the local server's internals (skipped on real lakeFS).
- ``lakefs_backends("real", ...)``: run on these backends only.

Ini option ``lakefs_one_backend_markers``: tests carrying one of these markers run on one backend
only under ``both`` (real lakeFS), for tests too slow to run twice.

A failed test against a launched real lakeFS gets the lakeFS log lines written during it as a
report section.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

if TYPE_CHECKING:
    import lakefs

    from airflow_lakefence.testing.lakefs_server.controls import Controls

ENDPOINT_ENV = "LAKEFENCE_TEST_LAKEFS_ENDPOINT"
ACCESS_KEY_ENV = "LAKEFENCE_TEST_LAKEFS_ACCESS_KEY_ID"
SECRET_KEY_ENV = "LAKEFENCE_TEST_LAKEFS_SECRET_ACCESS_KEY"
NAMESPACE_ENV = "LAKEFENCE_TEST_STORAGE_NAMESPACE"
BACKEND_ENV = "LAKEFENCE_TEST_LAKEFS_BACKEND"
LOCAL_ONLY_MARKER = "lakefs_local_only"
REAL_MARKER = "real_lakefs"
BACKENDS_MARKER = "lakefs_backends"
ONE_BACKEND_INI = "lakefs_one_backend_markers"
BACKENDS = ("local", "real")
_LOG_OFFSET = pytest.StashKey[int]()


@dataclass(frozen=True)
class LakeFSServerInfo:
    """Where the tests' lakeFS is and how to reach it.

    :param url: base URL without ``/api/v1`` (the fault-injecting proxy's, when there is one).
    :param access_key_id: access key id.
    :param secret_access_key: secret access key.
    :param storage_namespace: prefix for new repositories' storage namespaces.
    :param controls: counts, latency, faults and hooks applied to every request to ``url``.
    :param backend: ``"local"`` or ``"real"``.
    :param server: what runs behind the proxy: a ``LakeFSServer`` (local), a
        :class:`~airflow_lakefence.testing.real_lakefs.RealLakeFS` (launched real lakeFS; it can be
        killed and restarted), or ``None`` (an externally started lakeFS).
    """

    url: str
    access_key_id: str
    secret_access_key: str
    storage_namespace: str
    controls: Controls | None = None
    backend: str = "local"
    server: Any = None

    @property
    def endpoint(self) -> str:
        """The API endpoint, ``<url>/api/v1``."""
        return f"{self.url}/api/v1"

    @property
    def is_local(self) -> bool:
        """Whether this is the local test server (and not a real lakeFS)."""
        return self.backend == "local"

    def client(self) -> lakefs.Client:
        """Return a new ``lakefs.Client`` for this server."""
        import lakefs

        client: lakefs.Client = lakefs.Client(  # type: ignore[no-untyped-call]
            host=self.url, username=self.access_key_id, password=self.secret_access_key
        )
        return client


def real_lakefs_configured() -> bool:
    """Return whether the environment points the tests at an externally started real lakeFS."""
    return bool(os.environ.get(ENDPOINT_ENV))


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--lakefs-backend`` and the ``lakefs_one_backend_markers`` ini option."""
    group = parser.getgroup("lakefence", "airflow-lakefence lakeFS backends")
    group.addoption(
        "--lakefs-backend",
        choices=("local", "real", "both"),
        default=None,
        help=f"lakeFS behind the fixtures: local server, real lakeFS, or both (default ${BACKEND_ENV} or local)",
    )
    parser.addini(ONE_BACKEND_INI, "markers of tests run on one backend only (real) under --lakefs-backend=both",
                  type="linelist", default=[])  # fmt: skip


def selected_backends(config: pytest.Config) -> tuple[str, ...]:
    """Return the session's backends, in the order their tests run.

    :param config: the pytest config.
    """
    choice = config.getoption("--lakefs-backend", default=None) or os.environ.get(BACKEND_ENV)
    if not choice:
        choice = "real" if real_lakefs_configured() else "local"
    if choice not in ("local", "real", "both"):
        raise pytest.UsageError(f"{BACKEND_ENV} must be local, real or both, not {choice!r}")
    return BACKENDS if choice == "both" else (choice,)


def _test_backends(config: pytest.Config, node: Any) -> tuple[tuple[str, ...], str | None]:
    """The backends one test runs on, and why it runs on none of the selected ones."""
    selected = selected_backends(config)
    allowed: tuple[str, ...] = BACKENDS
    if node.get_closest_marker(REAL_MARKER) is not None:
        allowed = ("real",)
    if node.get_closest_marker(LOCAL_ONLY_MARKER) is not None:
        allowed = tuple(b for b in allowed if b == "local")
    marker = node.get_closest_marker(BACKENDS_MARKER)
    if marker is not None:
        allowed = tuple(b for b in allowed if b in marker.args)
    backends = tuple(b for b in selected if b in allowed)
    if not backends:
        if allowed == ("real",):
            return (), "needs real lakeFS: run with --lakefs-backend=real or both"
        if allowed == ("local",):
            return (), "needs the local lakeFS test server's internals: run with --lakefs-backend=local or both"
        return (), f"runs on {', '.join(allowed) or 'no backend'} only"
    one_backend = set(config.getini(ONE_BACKEND_INI))
    if len(backends) > 1 and any(node.get_closest_marker(name) is not None for name in one_backend):
        backends = ("real",) if "real" in backends else backends[:1]
    return backends, None


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers."""
    config.addinivalue_line(
        "markers", f"{LOCAL_ONLY_MARKER}: needs the local lakeFS test server (skipped against a real lakeFS)"
    )
    config.addinivalue_line("markers", f"{REAL_MARKER}: needs the real lakeFS; skipped on the local server")
    config.addinivalue_line("markers", f"{BACKENDS_MARKER}(*names): runs on these lakeFS backends only")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Under ``both``, run each test using the lakeFS fixtures once per backend."""
    if "lakefs_backend" not in metafunc.fixturenames:
        return
    if len(selected_backends(metafunc.config)) < 2:
        return
    backends, _ = _test_backends(metafunc.config, metafunc.definition)
    if backends:
        metafunc.parametrize("lakefs_backend", backends, indirect=True, scope="session", ids=list(backends))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip tests that cannot run on any selected backend."""
    if "lakefs_backend" not in getattr(item, "fixturenames", ()):
        if item.get_closest_marker(REAL_MARKER) is None and item.get_closest_marker(LOCAL_ONLY_MARKER) is None:
            return
    _, reason = _test_backends(item.config, item)
    if reason is not None:
        pytest.skip(reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Remember where the launched lakeFS's log stood when the test started."""
    server = getattr(getattr(item, "funcargs", {}).get("lakefs_server"), "server", None)
    ensure_running = getattr(server, "ensure_running", None)
    if ensure_running is not None:
        code = ensure_running()
        if code is not None:
            # Something outside the test (a signal from another process) stopped it: say so, go on.
            item.warn(pytest.PytestWarning(f"real lakeFS had exited ({code}) before this test: restarted it"))
    log_size = getattr(server, "log_size", None)
    if log_size is not None:
        item.stash[_LOG_OFFSET] = log_size()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the launched lakeFS's log lines written during a failed test to its report."""
    report: pytest.TestReport = yield
    if report.failed and report.when == "call" and _LOG_OFFSET in item.stash:
        server = item.funcargs.get("lakefs_server")  # type: ignore[attr-defined]
        tail = server.server.log_tail(item.stash[_LOG_OFFSET])
        report.sections.append(("real lakeFS log (during the test)", tail or "(empty)"))
    return report


@pytest.fixture(scope="session")
def lakefs_backend(request: pytest.FixtureRequest) -> str:
    """The backend of this test: ``"local"`` or ``"real"``."""
    param = getattr(request, "param", None)
    if param is not None:
        return str(param)
    return selected_backends(request.config)[0]


def real_lakefs_unavailable(message: str) -> NoReturn:
    """Skip the test because real lakeFS cannot run here; fail it instead on CI (``CI=true``).

    For fixtures of their own that need real lakeFS (the differential fidelity test uses it).

    :param message: why (e.g. the :class:`~airflow_lakefence.testing.real_lakefs.GoToolchainMissingError`).
    """
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(f"real lakeFS is mandatory on CI: {message}", pytrace=False)
    pytest.skip(f"real lakeFS unavailable: {message}")


@pytest.fixture(scope="session")
def lakefs_server(lakefs_backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LakeFSServerInfo]:
    """The session's lakeFS of the test's backend, behind a fault-injecting proxy."""
    # Imported here so that loading the plugin stays cheap for sessions that never use it.
    from airflow_lakefence.testing.lakefs_server.controls import Controls
    from airflow_lakefence.testing.proxy import FaultProxy

    if lakefs_backend == "real" and real_lakefs_configured():
        url = os.environ[ENDPOINT_ENV].rstrip("/").removesuffix("/api/v1")
        key = os.environ.get(ACCESS_KEY_ENV)
        secret = os.environ.get(SECRET_KEY_ENV)
        if not key or not secret:
            raise pytest.UsageError(f"{ENDPOINT_ENV} needs {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}")
        namespace = os.environ.get(NAMESPACE_ENV, "local://lakefence-tests")
        with FaultProxy(url) as proxy:
            yield LakeFSServerInfo(proxy.url, key, secret, namespace, proxy.controls, "real")
        return
    if lakefs_backend == "real":
        from airflow_lakefence.testing.real_lakefs import GoToolchainMissingError, RealLakeFS, ensure_lakefs_binary

        try:
            binary = ensure_lakefs_binary()
        except GoToolchainMissingError as exc:
            real_lakefs_unavailable(str(exc))
        real = RealLakeFS(binary, tmp_path_factory.mktemp("real-lakefs"))
        with real, FaultProxy(real.url) as proxy:
            yield LakeFSServerInfo(
                proxy.url,
                real.access_key_id,
                real.secret_access_key,
                "local://lakefence-tests",
                proxy.controls,
                "real",
                real,
            )
        return
    from airflow_lakefence.testing.lakefs_server import LakeFSServer

    with tempfile.TemporaryDirectory(prefix="lakefence-lakefs-") as data_dir, LakeFSServer(data_dir) as server:
        with FaultProxy(server.url, Controls(server.store)) as proxy:
            yield LakeFSServerInfo(
                proxy.url,
                server.access_key_id,
                server.secret_access_key,
                "local://lakefence-tests",
                proxy.controls,
                "local",
                server,
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
    if lakefs_server.controls is not None:
        lakefs_server.controls.reset()  # a leftover fault must not hit the clean-up
    try:
        repo.delete()
    except NotFoundException:
        pass


@pytest.fixture
def lakefs_controls(lakefs_server: LakeFSServerInfo) -> Iterator[Controls]:
    """The controls of the proxy in front of the session's lakeFS, reset before and after the test."""
    if lakefs_server.controls is None:
        pytest.skip("this lakeFS has no test controls (no proxy in front of it)")
    controls = lakefs_server.controls
    controls.reset()
    yield controls
    controls.reset()
