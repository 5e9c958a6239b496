"""A loopback proxy in front of a real API server that loses the answers a test picks.

A request the proxy is told to lose is forwarded and applied by the API server, and then the
connection closes without a byte of answer: what a load balancer, a NAT timeout or a network
fault does to a client between its request and the answer. The client's behaviour after that
(its own resend, then 409 for a create) is the real client's, against the real server.

The proxy speaks plain HTTP on 127.0.0.1 and forwards with the upstream client's own connection
settings (its TLS, client certificate and token), so a :class:`~dra_harness.kube.rest.Kube`
pointed at it needs no credentials of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import urllib3
from kubernetes import client

from dra_harness.kube.rest import Kube


class LossyProxy(ThreadingHTTPServer):
    """Forwards every request to ``upstream``; ``lose(method, path, body)`` says which answers never come back
    (each only while ``losses_left`` lasts). What it lost is kept in ``lost`` as (method, path)."""

    daemon_threads = True

    def __init__(self, upstream: Kube, lose: Callable[[str, str, bytes], bool], losses: int = 1) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream, self.lose, self.losses_left = upstream, lose, losses
        self.lost: list[tuple[str, str]] = []
        self._guard = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True, name="lossy-proxy")

    def __enter__(self) -> LossyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()

    def kube(self) -> Kube:
        """A real client whose every request goes through this proxy."""
        configuration = client.Configuration()
        configuration.host = f"http://127.0.0.1:{self.server_address[1]}"
        return Kube(configuration)

    def losing(self, method: str, path: str, body: bytes) -> bool:
        with self._guard:
            if self.losses_left > 0 and self.lose(method, path, body):
                self.losses_left -= 1
                self.lost.append((method, path))
                return True
        return False


class _Forward(BaseHTTPRequestHandler):
    server: LossyProxy
    protocol_version = "HTTP/1.1"

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        upstream = self.server.upstream
        answer = upstream._pool.request(  # the real client's TLS and credentials
            self.command, upstream.host + self.path, body=body or None,
            headers=upstream._headers(self.headers.get("Content-Type")),
            timeout=urllib3.Timeout(connect=5.0, read=30.0), retries=False)
        if self.server.losing(self.command, self.path, body):
            self.close_connection = True  # applied by the API server; the client hears nothing
            return
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.headers.get("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(answer.data)))
        self.end_headers()
        self.wfile.write(answer.data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

    def log_message(self, format: str, *args: object) -> None:  # the base class names it format
        pass
