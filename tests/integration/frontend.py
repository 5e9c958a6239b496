"""A loopback front end before a real embedded API server that answers 503 while told to: a load balancer whose
control plane restarts behind it.

Clients reach it over plain HTTP on 127.0.0.1 with a kubeconfig of its own (:meth:`FrontEnd.kubeconfig`, no
credentials); it forwards every request to the API server with the cluster's admin client certificate, watches
streamed as they come. :meth:`FrontEnd.fail_for` makes it answer every request 503 (a ``Status`` body, as an API
server's) for that long, and end the watches it streams, as a backend going away does.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import urllib3
import yaml

from dra_harness.kube.rest import Kube

_HOP = {"host", "connection", "content-length", "transfer-encoding", "keep-alive", "date", "server"}


class FrontEnd:
    def __init__(self, upstream: Kube) -> None:
        self.upstream = upstream
        self.failing_until = 0.0
        self.failed = 0  # requests answered 503
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: object) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if front.failing():
                    front.failed += 1
                    data = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 503,
                                       "reason": "ServiceUnavailable", "message": "no backend: the control plane is restarting"}).encode()
                    self.send_response(503)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(data)
                    self.close_connection = True
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                resp = front.upstream._pool.request(self.command, front.upstream.host + self.path, body=body, headers=headers,
                                                    preload_content=False, retries=False,
                                                    timeout=urllib3.Timeout(connect=5.0, read=None))
                try:
                    self.send_response(resp.status)
                    for k, v in resp.headers.items():
                        if k.lower() not in _HOP:
                            self.send_header(k, v)
                    if "watch=true" in self.path or "watch=1" in self.path:
                        self.send_header("Transfer-Encoding", "chunked")
                        self.end_headers()
                        for chunk in resp.stream(4096):
                            if front.failing():
                                break  # the backend went away: the stream ends
                            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                            self.wfile.flush()
                        self.wfile.write(b"0\r\n\r\n")
                        self.close_connection = True
                    else:
                        data = resp.read()
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                finally:
                    resp.release_conn()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def failing(self) -> bool:
        return time.monotonic() < self.failing_until

    def fail_for(self, seconds: float) -> None:
        self.failing_until = time.monotonic() + seconds

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "front",
            "clusters": [{"name": "front", "cluster": {"server": self.url}}],
            "contexts": [{"name": "front", "context": {"cluster": "front", "user": "front"}}],
            "users": [{"name": "front", "user": {}}]}))
        return path

    def __enter__(self) -> FrontEnd:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()
