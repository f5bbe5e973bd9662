"""A fault-injecting HTTP reverse proxy in front of a lakeFS (the local test server or a real one).

Every client of a test (the ``lakefs`` SDK, Airflow connections, Spark's S3A) talks to the proxy,
so the proxy sees every request: it counts lakeFS API requests by swagger operationId, adds
latency, and fires the scripted faults of its :class:`~lakefence_testing.controls.Controls`
(a status code, a delay, a dropped connection, a hook) before the request
reaches lakeFS or after lakeFS processed it. The same controls are served over HTTP under
``/_lakefence/`` for tests in other processes
(:class:`~lakefence_testing.controls.RemoteControls`).

Bodies stream through in chunks (uploads and downloads are never held whole in memory; request
bodies up to 1 MiB are read first so they can be sent again), client connections are kept alive,
each one served by its own thread with its own upstream connection. An upstream connection that
lakeFS closed (it was restarted, or it dropped an idle connection) is replaced before it is used,
and a request that still meets a closed one is sent once more on a fresh connection.
The ``Host`` header is forwarded unchanged, so S3 signatures (which cover it) stay valid.

Example::

    with FaultProxy("http://127.0.0.1:8000") as proxy:
        client = lakefs.Client(host=proxy.url, username=..., password=...)
        proxy.controls.add_fault("mergeIntoBranch", status=503)
"""

from __future__ import annotations

import http.client
import json
import re
import select
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lakefence_testing._lakefs_routes import ROUTES
from lakefence_testing._serving import ThreadedServer
from lakefence_testing.controls import Call, Controls, Fault

_CHUNK = 1 << 16
#: Request bodies up to this size are buffered, so a request can be sent again on a fresh connection.
_REPLAYABLE = 1 << 20
CONTROL_PREFIX = "/_lakefence/"
#: Connection-level headers (RFC 9110 7.6.1): each hop sets its own.
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding",
     "upgrade"}
)  # fmt: skip


def _compile_routes() -> list[tuple[str, re.Pattern[str], int, str]]:
    compiled = []
    for method, template, operation in ROUTES:
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template))
        literal = sum(1 for part in template.split("/") if part and not part.startswith("{"))
        compiled.append((method, re.compile(f"{pattern}/?"), literal, operation))
    # Literal segments win over parameters (``/auth/users/{id}`` against a fixed path).
    compiled.sort(key=lambda row: -row[2])
    return compiled


_COMPILED = _compile_routes()


def operation_of(method: str, path: str) -> str | None:
    """Return the swagger operationId of a lakeFS API request, or ``None`` outside ``/api/v1``.

    :param method: HTTP method.
    :param path: request path (a query string is ignored).
    """
    path = urllib.parse.urlsplit(path).path
    if not path.startswith("/api/v1/"):
        return None
    for route_method, pattern, _, operation in _COMPILED:
        if route_method == method and pattern.fullmatch(path):
            return operation
    return f"unknown:{method} {path}"


class _Dropped(Exception):
    """The client connection is to be closed without an answer."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # An answer is written in pieces (status line, headers, body): with Nagle's algorithm on, the
    # piece after the first waits for the client's delayed ACK, about 40 ms a request on loopback,
    # which no network between a task and lakeFS adds. The injected latency is the only delay wanted.
    disable_nagle_algorithm = True
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging."""

    def setup(self) -> None:
        super().setup()
        self._upstream: http.client.HTTPConnection | None = None

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self._close_upstream()

    def _close_upstream(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None

    # -- dispatch ----------------------------------------------------------------------------

    def _handle(self) -> None:
        try:
            if self.path.startswith(CONTROL_PREFIX):
                self._control()
            else:
                self._proxy()
        except _Dropped:
            self.close_connection = True
            self._close_upstream()
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        except (ConnectionError, TimeoutError, OSError, http.client.HTTPException):
            # The client or lakeFS went away mid-request: nothing sensible can be answered.
            self.close_connection = True
            self._close_upstream()

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _handle

    # -- request bodies ----------------------------------------------------------------------

    def _body_chunks(self) -> Any:
        """Yield the request body as it arrives (Content-Length or chunked)."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size_line = self.rfile.readline(65537)
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return
                remaining = size
                while remaining:
                    data = self.rfile.read(min(remaining, _CHUNK))
                    if not data:
                        raise ConnectionResetError("client closed mid-body")
                    remaining -= len(data)
                    yield data
                self.rfile.readline(3)
        length = int(self.headers.get("Content-Length") or 0)
        while length > 0:
            data = self.rfile.read(min(length, _CHUNK))
            if not data:
                raise ConnectionResetError("client closed mid-body")
            length -= len(data)
            yield data

    def _drain(self) -> None:
        for _ in self._body_chunks():
            pass

    # -- answers -----------------------------------------------------------------------------

    def _send_json(self, status: int, body: Any) -> None:
        payload = b"" if body is None else json.dumps(body).encode("utf-8")
        self.send_response(status)
        if payload:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if payload and self.command != "HEAD":
            self.wfile.write(payload)

    # -- controls ----------------------------------------------------------------------------

    def _control(self) -> None:
        controls = self.server.controls
        name = urllib.parse.urlsplit(self.path).path[len(CONTROL_PREFIX) :].strip("/")
        raw = b"".join(self._body_chunks())
        method = self.command
        try:
            body = json.loads(raw) if raw else {}
            if name == "counts" and method == "GET":
                return self._send_json(200, controls.counts())
            if name == "counts" and method == "DELETE":
                controls.reset_counts()
                return self._send_json(204, None)
            if name == "rounds" and method == "GET":
                return self._send_json(200, {"rounds": controls.rounds()})
            if name == "stats" and method == "GET":
                return self._send_json(200, controls.stats())
            if name == "latency" and method == "GET":
                return self._send_json(200, {"seconds": controls.latency()})
            if name == "latency" and method == "PUT":
                controls.set_latency(float(body["seconds"]))
                return self._send_json(204, None)
            if name == "faults" and method == "POST":
                fault = controls.add_fault(
                    operation=str(body["operation"]),
                    nth=int(body.get("nth") or 1),
                    status=body.get("status"),
                    delay=body.get("delay"),
                    drop=bool(body.get("drop", False)),
                    when=body.get("when") or "before",
                )
                return self._send_json(201, fault.to_json())
            if name == "faults" and method == "GET":
                return self._send_json(200, [fault.to_json() for fault in controls.faults()])
            if name == "faults" and method == "DELETE":
                controls.clear_faults()
                return self._send_json(204, None)
        except (KeyError, TypeError, ValueError) as exc:
            return self._send_json(400, {"message": str(exc)})
        return self._send_json(404, {"message": "unknown control"})

    # -- forwarding --------------------------------------------------------------------------

    def _apply(self, faults: list[Fault], call: Call, drain: bool, answer: Any = None) -> bool:
        """Run fired faults; return whether an answer was sent instead of lakeFS's.

        :raises _Dropped: for a drop.
        """
        for fault in faults:
            if fault.hook is not None:
                fault.hook(call)
            if fault.delay:
                time.sleep(fault.delay)
            if fault.drop:
                raise _Dropped
            if fault.status is not None:
                if drain:
                    self._drain()
                if answer is not None:
                    answer()
                self._send_json(fault.status, {"message": "injected fault"})
                return True
        return False

    def _proxy(self) -> None:
        controls = self.server.controls
        operation = operation_of(self.command, self.path)
        fired: list[Fault] = []
        if operation is None:
            return self._proxy_counted(None, [])
        fired = controls.record_call(operation)
        answered = [False]

        def answer() -> None:
            # Before the answer is relayed: the client cannot send its next request earlier.
            if not answered[0]:
                answered[0] = True
                controls.end_call()

        try:
            latency = controls.latency()
            if latency:
                time.sleep(latency)
            self._proxy_counted(operation, fired, answer)
        finally:
            answer()

    def _proxy_counted(self, operation: str | None, fired: list[Fault], answer: Any = None) -> None:
        call = Call(operation or "", self.command, self.path)
        if self._apply([f for f in fired if f.when == "before"], call, drain=True, answer=answer):
            return
        response = self._forward()
        if answer is not None:
            answer()
        after = [f for f in fired if f.when == "after"]
        if after:
            body = response.read()  # lakeFS processed the request: its answer is complete
            if self._apply(after, Call(call.operation, call.method, call.path, response.status), drain=False):
                if response.will_close:
                    self._close_upstream()
                return
            self._relay(response, body)
        else:
            self._relay(response, None)
        if response.will_close:
            self._close_upstream()

    def _forward(self) -> http.client.HTTPResponse:
        """Send the request to lakeFS; a lakeFS that is down drops the client's connection."""
        chunked = self.headers.get("Transfer-Encoding", "").lower() == "chunked"
        length = int(self.headers.get("Content-Length") or 0)
        body = None if chunked or length > _REPLAYABLE else b"".join(self._body_chunks())
        if self._upstream is not None and _closed_by_peer(self._upstream):
            self._close_upstream()
        reused = self._upstream is not None
        try:
            return self._send_upstream(chunked, body)
        except ConnectionError:
            # A kept-alive connection lakeFS closed between the check and the send: nothing reached
            # lakeFS, so the request is sent once more, when its body is still at hand.
            self._close_upstream()
            if not reused or body is None:
                raise _Dropped from None
        except (OSError, http.client.HTTPException):
            self._close_upstream()
            raise _Dropped from None
        try:
            return self._send_upstream(chunked, body)
        except (OSError, http.client.HTTPException):
            self._close_upstream()
            raise _Dropped from None

    def _send_upstream(self, chunked: bool, body: bytes | None) -> http.client.HTTPResponse:
        if self._upstream is None:
            self._upstream = http.client.HTTPConnection(
                self.server.upstream_host, self.server.upstream_port, timeout=self.server.timeout
            )
        upstream = self._upstream
        upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for key, value in self.headers.items():
            if key.lower() not in _HOP_BY_HOP:
                upstream.putheader(key, value)
        if chunked:
            upstream.putheader("Transfer-Encoding", "chunked")
        upstream.endheaders()
        for data in (body,) if body is not None else self._body_chunks():
            if data:
                upstream.send(f"{len(data):x}\r\n".encode() + data + b"\r\n" if chunked else data)
        if chunked:
            upstream.send(b"0\r\n\r\n")
        return upstream.getresponse()

    def _relay(self, response: http.client.HTTPResponse, body: bytes | None) -> None:
        """Send lakeFS's answer to the client, streaming it when ``body`` is ``None``."""
        self.send_response_only(response.status, response.reason)
        length = response.getheader("Content-Length")
        no_body = self.command == "HEAD" or response.status in (204, 304) or 100 <= response.status < 200
        for key, value in response.getheaders():
            if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                self.send_header(key, value)
        chunked = False
        if body is not None:
            self.send_header("Content-Length", str(len(body)) if not no_body else length or "0")
        elif length is not None:
            self.send_header("Content-Length", length)
        elif not no_body:
            chunked = True
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if no_body:
            response.read()
            response.close()
            self.wfile.flush()
            return
        if body is not None:
            self.wfile.write(body)
            self.wfile.flush()
            return
        while True:
            data = response.read1(_CHUNK)
            if not data:
                break
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n" if chunked else data)
        # read1 never marks a length-delimited response done: close it so the connection can be reused.
        response.close()
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _closed_by_peer(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle upstream connection was closed by lakeFS (readable at rest means EOF or garbage)."""
    sock = connection.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], controls: Controls, upstream: str, timeout: float) -> None:
        super().__init__(address, _Handler)
        self.controls = controls
        self.timeout = timeout
        self.set_upstream(upstream)

    def set_upstream(self, upstream: str) -> None:
        parts = urllib.parse.urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError("the upstream must be an http:// URL")
        self.upstream_host = parts.hostname
        self.upstream_port = parts.port or 80


class FaultProxy(ThreadedServer):
    """A reverse proxy on a local port in front of the lakeFS at ``upstream``.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.

    :param upstream: lakeFS base URL (``http://127.0.0.1:8000``, without ``/api/v1``).
    :param controls: the controls to apply; new ones by default.
    :param host: interface to bind.
    :param port: port to bind; 0 picks a free one.
    :param timeout: seconds to wait on lakeFS per socket operation.
    """

    kind = "proxy"

    def __init__(
        self,
        upstream: str,
        controls: Controls | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        timeout: float = 300.0,
    ) -> None:
        super().__init__(host, port)
        self.upstream = upstream.rstrip("/")
        self.controls = controls if controls is not None else Controls()
        self.timeout = timeout

    def _bind(self) -> _ProxyServer:
        return _ProxyServer((self.host, self.port), self.controls, self.upstream, self.timeout)


def main(argv: list[str] | None = None) -> int:
    """``python -m lakefence_testing.proxy UPSTREAM [--port N] [--latency S]``: serve until stopped.

    Prints the proxy's URL as its first line (benchmarks run the proxy in a process of its own, so
    its work is not charged to the measured client); its controls are served under ``/_lakefence/``
    (:class:`~lakefence_testing.controls.RemoteControls`).
    """
    import argparse
    import signal
    import sys

    parser = argparse.ArgumentParser(prog="python -m lakefence_testing.proxy", description=main.__doc__)
    parser.add_argument("upstream", help="lakeFS base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default: a free one)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every API request")
    args = parser.parse_args(argv)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with FaultProxy(args.upstream, port=args.port) as proxy:
        proxy.controls.set_latency(args.latency)
        print(proxy.url, flush=True)
        try:
            stopped.wait()
        except KeyboardInterrupt:
            pass
    print("proxy stopped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
