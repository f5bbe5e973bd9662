"""What the local lakeFS server and the fault proxy share: a TCP server on a local port, served in a daemon thread,
and thread-safe named counters."""

from __future__ import annotations

import socketserver
import threading
from collections import Counter
from types import TracebackType
from typing import Self


class ThreadedServer:
    """A server on a local port serving in a daemon thread; a context manager, or :meth:`start` and :meth:`stop`.

    :param host: interface to bind.
    :param port: port to bind; 0 picks a free one.
    """

    #: How messages and the serving thread name it.
    kind = "server"

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._server: socketserver.TCPServer | None = None
        self._thread: threading.Thread | None = None

    def _bind(self) -> socketserver.TCPServer:
        """Bind the port and return the server that answers on it (subclasses implement it)."""
        raise NotImplementedError

    def _stopped(self) -> None:
        """Release what :meth:`_bind` opened besides the socket, once the server stopped."""

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8000`` (no ``/api/v1``): clients use it as lakeFS's.

        :raises RuntimeError: if it is not running.
        """
        if self._server is None:
            raise RuntimeError(f"{self.kind} is not running")
        return f"http://{self.host}:{self._server.server_address[1]}"

    @property
    def endpoint(self) -> str:
        """The lakeFS API endpoint, ``<url>/api/v1``."""
        return f"{self.url}/api/v1"

    def start(self) -> Self:
        """Bind the port and serve in a daemon thread.

        :raises RuntimeError: if already started.
        """
        if self._server is not None:
            raise RuntimeError(f"{self.kind} already started")
        self._server = server = self._bind()
        self._thread = threading.Thread(
            target=server.serve_forever, name=f"lakefs-{self.kind}-{server.server_address[1]}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release what it holds. Safe to call twice."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._stopped()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class Tally:
    """Named counters that threads add to: a proxy's request counts, a store's internal counters."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, name: str, amount: int = 1) -> None:
        """Add ``amount`` to the counter ``name``."""
        with self._lock:
            self._counts[name] += amount

    def snapshot(self) -> dict[str, int]:
        """Return the counters as they are now."""
        with self._lock:
            return dict(self._counts)

    def clear(self) -> None:
        """Zero every counter."""
        with self._lock:
            self._counts.clear()
