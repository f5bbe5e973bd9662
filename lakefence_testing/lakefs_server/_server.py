"""Starting and stopping the server: in a background thread, or as a process (``run_server``, behind a proxy)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import Any, TextIO

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from lakefence_testing._serving import ThreadedServer
from lakefence_testing.lakefs_server._app import RAW_HEADERS_KEY, LakeFSApp
from lakefence_testing.lakefs_server._store import Store

# The lakeFS quickstart credentials: what lakeFS examples and docs use.
DEFAULT_ACCESS_KEY_ID = "AKIAIOSFOLQUICKSTART"
DEFAULT_SECRET_ACCESS_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


class _QuietHandler(WSGIRequestHandler):
    """Request handler that does not log every request to stderr.

    It also passes on the raw request headers: the WSGI environ leaves out header names with
    ``_`` (werkzeug drops them), but lakeFS reads ``X-Lakefs-Meta-my_key`` as metadata ``my_key``.
    """

    def make_environ(self) -> dict[str, Any]:
        """Add ``lakefence.raw_headers``: the request headers as received."""
        environ = super().make_environ()
        environ[RAW_HEADERS_KEY] = list(self.headers.items())
        return environ

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Skip per-request logging."""

    def log(self, type: str, message: str, *args: Any) -> None:
        """Log only errors."""
        if type == "error":
            super().log(type, message, *args)


class LakeFSServer(ThreadedServer):
    """A lakeFS-compatible server on a local port, backed by ``data_dir``.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Request counts, latency and
    faults are the fault-injecting proxy's: put a
    :class:`~lakefence_testing.proxy.FaultProxy` in front (``FaultProxy(server.url,
    Controls(server.store))``, so that its ``stats()`` are this server's internal counters).

    :param data_dir: directory for the SQLite metadata and object bytes; reusing it after a
        restart (even after SIGKILL) keeps every acknowledged write.
    :param host: interface to bind.
    :param port: port to bind; 0 picks a free one.
    :param access_key_id: the one accepted access key id (Basic auth user).
    :param secret_access_key: its secret (Basic auth password).
    :param committer: name recorded as the committer of commits and merges.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        host: str = "127.0.0.1",
        port: int = 0,
        access_key_id: str = DEFAULT_ACCESS_KEY_ID,
        secret_access_key: str = DEFAULT_SECRET_ACCESS_KEY,
        committer: str = "admin",
    ) -> None:
        super().__init__(host, port)
        self.data_dir = os.fspath(data_dir)
        self.access_key_id = access_key_id
        self.secret_access_key = secret_access_key
        self._committer = committer
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        """The server's store, for server-internal test setup.

        :raises RuntimeError: if the server was never started.
        """
        if self._store is None:
            raise RuntimeError("server is not running")
        return self._store

    def _bind(self) -> BaseWSGIServer:
        self._store = Store(self.data_dir, committer=self._committer)
        app = LakeFSApp(self._store, self.access_key_id, self.secret_access_key)
        return make_server(self.host, self.port, app, threaded=True, request_handler=_QuietHandler)

    def _stopped(self) -> None:
        """Close the database connections."""
        if self._store is not None:
            self._store.close()


def run_server(
    data_dir: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 0,
    access_key_id: str = DEFAULT_ACCESS_KEY_ID,
    secret_access_key: str = DEFAULT_SECRET_ACCESS_KEY,
    latency: float = 0.0,
    out: TextIO | None = None,
) -> None:
    """Run a server behind a fault-injecting proxy until SIGTERM or SIGINT; print the proxy's URL.

    The proxy (:class:`~lakefence_testing.proxy.FaultProxy`) listens on ``host:port`` and
    serves the test controls under ``/_lakefence/`` (counts, latency, faults, and the server's
    internal ``stats``; :class:`~lakefence_testing.controls.RemoteControls`);
    the server itself listens on another free port of ``host``.

    :param data_dir: data directory.
    :param host: interface to bind.
    :param port: the proxy's port; 0 picks a free one.
    :param access_key_id: accepted access key id.
    :param secret_access_key: accepted secret.
    :param latency: seconds the proxy adds to every API request.
    :param out: where to print the URL (default stdout); flushed at once.
    """
    from lakefence_testing.controls import Controls
    from lakefence_testing.proxy import FaultProxy

    server = LakeFSServer(data_dir, host, 0, access_key_id, secret_access_key)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with server, FaultProxy(server.url, Controls(server.store), host=host, port=port) as proxy:
            proxy.controls.set_latency(latency)
            stream = out if out is not None else sys.stdout
            print(proxy.url, file=stream, flush=True)
            stop.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
