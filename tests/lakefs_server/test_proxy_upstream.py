"""The fault proxy survives a lakeFS restart under a kept-alive client connection.

A restarted lakeFS (tests kill -9 it and start it again on the same port) leaves every kept-alive
upstream connection of the proxy dead. A client whose connection to the proxy outlived the restart
(fsspec caches filesystem instances, and with them their connection pools) must get lakeFS's answer,
not a dropped connection: urllib3 never retries a POST whose connection was dropped.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lakefence_testing import proxy as proxy_module
from lakefence_testing.controls import Controls
from lakefence_testing.proxy import FaultProxy


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.accepted.append(self.connection)  # type: ignore[attr-defined]

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        payload = json.dumps({"method": self.command, "body": body.decode(), "generation": self.server.generation})
        data = payload.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer


class _Upstream:
    """A tiny keep-alive HTTP server that can be 'restarted' on the same port."""

    def __init__(self) -> None:
        self.port = 0
        self.generation = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.generation += 1
        server = ThreadingHTTPServer(("127.0.0.1", self.port), _Echo)
        server.daemon_threads = True
        server.generation = self.generation  # type: ignore[attr-defined]
        server.accepted = []  # type: ignore[attr-defined]
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop as a killed process does: the kernel closes its listening and its accepted sockets."""
        server, self._server = self._server, None
        assert server is not None
        server.shutdown()
        server.server_close()
        for sock in server.accepted:  # type: ignore[attr-defined]
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def upstream() -> Iterator[_Upstream]:
    server = _Upstream()
    server.start()
    yield server
    if server._server is not None:
        server.stop()


def _post(conn: http.client.HTTPConnection, body: bytes) -> dict[str, object]:
    conn.request("POST", "/api/v1/repositories/r/branches", body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    return json.loads(response.read())


@pytest.mark.parametrize("check_before_use", [True, False], ids=["closed-seen-before-use", "closed-met-on-send"])
def test_post_after_upstream_restart_reaches_the_new_process(
    upstream: _Upstream, monkeypatch: pytest.MonkeyPatch, check_before_use: bool
) -> None:
    if not check_before_use:
        # The race the check cannot close: lakeFS closes the connection just after the check.
        monkeypatch.setattr(proxy_module, "_closed_by_peer", lambda connection: False)
    with FaultProxy(f"http://127.0.0.1:{upstream.port}", Controls()) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", int(proxy.url.rsplit(":", 1)[1]), timeout=10)
        assert _post(conn, b'{"n": 1}') == {"method": "POST", "body": '{"n": 1}', "generation": 1}
        upstream.restart()
        # Same client connection to the proxy; its upstream connection died with the old process.
        assert _post(conn, b'{"n": 2}') == {"method": "POST", "body": '{"n": 2}', "generation": 2}
        assert _post(conn, b'{"n": 3}')["generation"] == 2
        conn.close()
