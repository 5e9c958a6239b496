"""What a cluster's listening sockets offer a local user who holds no credential.

Why: the harness runs everything as root on a shared machine, so any listener another
user can reach is a way to root unless it authenticates. docs/embedded-cluster.md states where each
process listens and how it authenticates; this module checks that claim from the
kernel's view (each process's socket descriptors against ``/proc/<pid>/net/tcp{,6}``),
so a flag change that makes something listen on the node IP or 0.0.0.0 is caught, and
asks every listener for a page with no certificate and no token. Only a refusal counts
as authenticated: HTTP 401, or a TLS handshake that demands a client certificate.
"""

from __future__ import annotations

import http.client
import ipaddress
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dra_harness.host.processes import listening_sockets

#: Answers that mean "who are you?": the request got nothing without a credential.
REFUSALS = ("https 401", "tls requires a client certificate")
#: What a stranger asks for: a kubelet's pod list, metrics and configuration. Not ``/``: a
#: kubelet answers 404 for a path it does not serve before it asks who is calling.
PROBE_PATHS = ("/pods", "/metrics", "/configz")
# OpenSSL's reasons for a server that ends the handshake because no certificate came.
_CERT_REQUIRED = {"TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_BAD_CERTIFICATE", "SSLV3_ALERT_HANDSHAKE_FAILURE"}
# ... and for a server that does not speak TLS at all.
_NOT_TLS = {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "UNKNOWN_PROTOCOL", "HTTP_REQUEST"}


@dataclass(frozen=True)
class Listener:
    address: str
    port: int
    pid: int
    process: str

    @property
    def loopback(self) -> bool:
        """Reachable only from this host's loopback (a wildcard address is not)."""
        ip = ipaddress.ip_address(self.address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
            ip = ip.ipv4_mapped
        return ip.is_loopback

    @property
    def reach_at(self) -> str:
        """An address to connect to: the wildcard ones are reachable at loopback too."""
        return {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.address, self.address)


def _process(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def listeners(pids: list[int]) -> list[Listener]:
    """Every TCP listener of ``pids``, with the name of the process that owns it."""
    return sorted({Listener(a, p, pid, _process(pid)) for a, p, pid in listening_sockets(pids)},
                  key=lambda s: (s.process, s.port))


def anonymous_answer(host: str, port: int, path: str = "/", timeout: float = 5) -> str:
    """What a client with no certificate and no token gets for ``GET path``: ``https <status>``,
    ``tls requires a client certificate``, ``http <status>`` (no TLS at all) or ``no answer: <why>``."""
    ctx = ssl.create_default_context()
    # A stranger does not know the CA either; only what the server does with them is of interest.
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        return f"https {_get(http.client.HTTPSConnection(host, port, context=ctx, timeout=timeout), path)}"
    except ssl.SSLError as e:
        if e.reason in _CERT_REQUIRED:
            return "tls requires a client certificate"
        if e.reason not in _NOT_TLS:
            return f"no answer: TLS {e.reason}"
    except (OSError, http.client.HTTPException) as e:
        return f"no answer: {type(e).__name__} {e}"
    try:
        return f"http {_get(http.client.HTTPConnection(host, port, timeout=timeout), path)}"
    except (OSError, http.client.HTTPException) as e:
        return f"no answer: {type(e).__name__} {e}"


def stranger_answer(host: str, port: int) -> str:
    """The first answer to :data:`PROBE_PATHS` that is not a refusal, else the refusal."""
    answers = [anonymous_answer(host, port, path) for path in PROBE_PATHS]
    return next((a for a in answers if a not in REFUSALS), answers[0])


def _get(conn: http.client.HTTPConnection, path: str) -> int:
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def unauthenticated(found: list[Listener], ask: Callable[[str, int], str] = stranger_answer) -> list[str]:
    """One line per listener beyond loopback that does not refuse a request without credentials."""
    problems = []
    for s in found:
        if s.loopback:
            continue
        answer = ask(s.reach_at, s.port)
        if answer not in REFUSALS:
            problems.append(f"{s.process} (pid {s.pid}) on {s.address}:{s.port} answers a stranger: {answer}")
    return problems
