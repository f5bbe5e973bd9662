"""pytest plugin (opt-in): a lakeFS for every test session (local server or real lakeFS), a fresh repository per test.

Nothing loads it on its own: a test suite asks for it with ``-p lakefence_testing.pytest_plugin``
on the command line (or in ``addopts``), or with
``pytest_plugins = ["lakefence_testing.pytest_plugin"]`` in its top-level ``conftest.py``. The
local server needs the ``testing`` extra (``pip install 'airflow-provider-lakefence[testing]'``).

Backends (option ``--lakefs-backend=local|real|both``, or ``LAKEFENCE_TEST_LAKEFS_BACKEND``;
default ``local``, or ``real`` when ``LAKEFENCE_TEST_LAKEFS_ENDPOINT`` is set):

- ``local``: the package's lakeFS-compatible server, in-process, in a temporary directory.
- ``real``: a real lakeFS: the one named by ``LAKEFENCE_TEST_LAKEFS_ENDPOINT``,
  ``LAKEFENCE_TEST_LAKEFS_ACCESS_KEY_ID`` and ``LAKEFENCE_TEST_LAKEFS_SECRET_ACCESS_KEY``
  (repositories under ``LAKEFENCE_TEST_STORAGE_NAMESPACE``), else the one the session fixture
  ``lakefence_real_lakefs`` starts: a suite that launches its own lakeFS overrides that fixture in
  its conftest (without either, the real backend's tests are skipped with the reason; with
  ``CI=true`` they fail).
- ``both``: every test using these fixtures runs once per backend; its id names the backend
  (``test_x[local]``, ``test_x[real]``). Each backend's server starts once per session.

Either backend sits behind a fault-injecting proxy (:mod:`lakefence_testing.proxy`):
the fixtures' URL is the proxy's, so request counts, latency and faults work on both.

Fixtures (prefixed ``lakefence_`` so that they cannot shadow a suite's own ``lakefs_*`` fixtures):

- ``lakefence_backend`` (session): ``"local"`` or ``"real"``.
- ``lakefence_server`` (session): a :class:`LakeFSServerInfo`.
- ``lakefence_client``: a ``lakefs.Client`` for that server.
- ``lakefence_repo``: a new ``lakefs.Repository`` (default branch ``main``), deleted afterwards.
- ``lakefence_controls``: the proxy's controls (counts, latency, faults, hooks), reset before and
  after the test.
- ``lakefence_real_lakefs`` (session): the started real lakeFS behind the ``real`` backend when no
  endpoint is configured (override it; the default skips).

Markers:

- ``real_lakefs``: needs real lakeFS (skipped on the local backend).
- ``lakefs_local_only``: needs the local server's internals (skipped on real lakeFS).
- ``lakefs_backends("real", ...)``: run on these backends only.

Ini option ``lakefs_one_backend_markers``: tests carrying one of these markers run on one backend
only under ``both`` (real lakeFS), for tests too slow to run twice.

A failed test against a launched real lakeFS (one with ``log_size``/``log_tail`` methods) gets the
lakeFS log lines written during it as a report section.
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

    from lakefence_testing.controls import Controls

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
#: The fixture a test requests to run on the selected backends (parametrized under ``both``).
BACKEND_FIXTURE = "lakefence_backend"
SERVER_FIXTURE = "lakefence_server"
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
    :param server: what runs behind the proxy: a ``LakeFSServer`` (local), what the
        ``lakefence_real_lakefs`` fixture started (a launched real lakeFS), or ``None`` (an
        externally started lakeFS).
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
    if BACKEND_FIXTURE not in metafunc.fixturenames:
        return
    if len(selected_backends(metafunc.config)) < 2:
        return
    backends, _ = _test_backends(metafunc.config, metafunc.definition)
    if backends:
        metafunc.parametrize(BACKEND_FIXTURE, backends, indirect=True, scope="session", ids=list(backends))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip tests that cannot run on any selected backend."""
    if BACKEND_FIXTURE not in getattr(item, "fixturenames", ()):
        if item.get_closest_marker(REAL_MARKER) is None and item.get_closest_marker(LOCAL_ONLY_MARKER) is None:
            return
    _, reason = _test_backends(item.config, item)
    if reason is not None:
        pytest.skip(reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Remember where the launched lakeFS's log stood when the test started."""
    server = getattr(getattr(item, "funcargs", {}).get(SERVER_FIXTURE), "server", None)
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
        server = item.funcargs.get(SERVER_FIXTURE)  # type: ignore[attr-defined]
        tail = server.server.log_tail(item.stash[_LOG_OFFSET])
        report.sections.append(("real lakeFS log (during the test)", tail or "(empty)"))
    return report


@pytest.fixture(scope="session")
def lakefence_backend(request: pytest.FixtureRequest) -> str:
    """The backend of this test: ``"local"`` or ``"real"``."""
    param = getattr(request, "param", None)
    if param is not None:
        return str(param)
    return selected_backends(request.config)[0]


def real_lakefs_unavailable(message: str) -> NoReturn:
    """Skip the test because real lakeFS cannot run here; fail it instead on CI (``CI=true``).

    For fixtures that need real lakeFS (``lakefence_real_lakefs`` and a suite's own).

    :param message: why (e.g. no Go toolchain to build it).
    """
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(f"real lakeFS is mandatory on CI: {message}", pytrace=False)
    pytest.skip(f"real lakeFS unavailable: {message}")


@pytest.fixture(scope="session")
def lakefence_real_lakefs() -> Any:
    """The real lakeFS the ``real`` backend uses when no endpoint is configured (override it to start one).

    The value needs ``url`` (without ``/api/v1``), ``access_key_id`` and ``secret_access_key``; with
    ``log_size()``/``log_tail(since)`` a failed test gets the lakeFS log written during it, with
    ``ensure_running()`` a lakeFS stopped by something else is restarted before each test.
    """
    real_lakefs_unavailable(
        f"set {ENDPOINT_ENV}, {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}, "
        "or override the lakefence_real_lakefs fixture to start one"
    )


@pytest.fixture(scope="session")
def lakefence_server(lakefence_backend: str, request: pytest.FixtureRequest) -> Iterator[LakeFSServerInfo]:
    """The session's lakeFS of the test's backend, behind a fault-injecting proxy."""
    # Imported here so that loading the plugin stays cheap for sessions that never use it.
    from lakefence_testing.controls import Controls
    from lakefence_testing.proxy import FaultProxy

    if lakefence_backend == "real":
        namespace = "local://lakefence-tests"
        if real_lakefs_configured():
            url = os.environ[ENDPOINT_ENV].rstrip("/").removesuffix("/api/v1")
            key, secret = os.environ.get(ACCESS_KEY_ENV), os.environ.get(SECRET_KEY_ENV)
            if not key or not secret:
                raise pytest.UsageError(f"{ENDPOINT_ENV} needs {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}")
            namespace, launched = os.environ.get(NAMESPACE_ENV, namespace), None
        else:
            launched = request.getfixturevalue("lakefence_real_lakefs")
            url, key, secret = launched.url, launched.access_key_id, launched.secret_access_key
        with FaultProxy(url) as proxy:
            yield LakeFSServerInfo(proxy.url, key, secret, namespace, proxy.controls, "real", launched)
        return
    from lakefence_testing.lakefs_server import LakeFSServer

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
def lakefence_client(lakefence_server: LakeFSServerInfo) -> lakefs.Client:
    """A ``lakefs.Client`` for the session's lakeFS."""
    return lakefence_server.client()


@pytest.fixture
def lakefence_repo(
    lakefence_server: LakeFSServerInfo, lakefence_client: lakefs.Client
) -> Iterator[lakefs.Repository]:
    """A new repository with default branch ``main``, deleted after the test."""
    import lakefs
    from lakefs.exceptions import NotFoundException

    name = f"lakefence-{uuid.uuid4().hex[:16]}"
    namespace = f"{lakefence_server.storage_namespace.rstrip('/')}/{name}"
    repo = lakefs.Repository(name, client=lakefence_client).create(storage_namespace=namespace, default_branch="main")
    yield repo
    if lakefence_server.controls is not None:
        lakefence_server.controls.reset()  # a leftover fault must not hit the clean-up
    try:
        repo.delete()
    except NotFoundException:
        pass


@pytest.fixture
def lakefence_controls(lakefence_server: LakeFSServerInfo) -> Iterator[Controls]:
    """The controls of the proxy in front of the session's lakeFS, reset before and after the test."""
    if lakefence_server.controls is None:
        pytest.skip("this lakeFS has no test controls (no proxy in front of it)")
    controls = lakefence_server.controls
    controls.reset()
    yield controls
    controls.reset()
