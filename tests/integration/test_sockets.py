"""Every TCP listener of a cluster with a real node is loopback-only or refuses a stranger.

The README's promise, checked from the kernel's view: each cluster process's socket
descriptors against ``/proc/<pid>/net/tcp{,6}`` (tracked processes, strays naming the
cluster's directories such as containerd's shims, and whatever runs in a real node's
cgroups). Beyond loopback only a real node's kubelet may listen, on its node IP, and it
must answer 401 to a request without credentials. On loopback each listener must be one
whose authentication is stated in :data:`LOOPBACK`, and etcd must refuse a TLS client
without a certificate of its own CA. Needs root (a real node); skipped with the reason elsewhere.
"""

from __future__ import annotations

import http.client
import ssl
import subprocess
import sys
import time

import pytest

from dra_harness.providers.embedded import hostplumbing, realcluster
from dra_harness.providers.embedded.commands import APISERVER_ETCD_CLIENT
from dra_harness.providers.embedded.exposure import Listener, anonymous_answer, listeners, stranger_answer, unauthenticated
from dra_harness.providers.embedded.pki import PKI
from dra_harness.host.processes import listening_sockets
from dra_harness.components.real_node_host import unavailable_reason

from .conftest import REAL_NODE

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no real nodes here: {REASON}")

#: Who listens on loopback (by /proc/<pid>/comm) and what a local user without credentials gets there.
LOOPBACK = {
    "etcd": "TLS; a client certificate of the etcd CA required (client and peer port)",
    "kube-apiserver": "TLS; client certificate of the cluster CA or a token; anonymous requests get only "
                      "/healthz, /livez, /readyz and /version",
    "kube-controller": "TLS; authentication and authorization delegated to the API server; anonymous "
                       "requests get only /healthz, /livez, /readyz",
    "kube-scheduler": "as kube-controller-manager",
    "kwok": "TLS (self-signed), no authentication: /healthz and the simulated nodes' /metrics only "
            "(profiling and debugging handlers off)",
    "kubelet": "plain HTTP, /healthz only (the authenticated port is on the node IP)",
    "containerd": "plain HTTP CRI streaming server: serves only URLs holding a one-time token from the CRI socket",
}
#: Paths whose anonymous answers pin down the loopback column above (what a local user gets there).
LOOPBACK_ANSWERS = {
    "kube-apiserver": {"/healthz": "https 200", "/version": "https 200", "/pods": "https 403", "/metrics": "https 403"},
    "kube-controller": {"/healthz": "https 200", "/metrics": "https 403", "/configz": "https 403"},
    "kube-scheduler": {"/healthz": "https 200", "/metrics": "https 403", "/configz": "https 403"},
    "kwok": {"/healthz": "https 200", "/metrics": "https 200", "/debug/pprof/": "https 405",
             "/containerLogs/a/b/c": "https 405"},
    "kubelet": {"/healthz": "http 200", "/pods": "http 404", "/configz": "http 404"},
    "containerd": {"/exec/x": "http 404", "/": "http 404"},
}


def _cluster_listeners(cluster, extra: list[int] = ()) -> list[Listener]:
    pids = cluster.pids() + list(extra)
    for name in cluster.state().spec.real_node_names():
        pids += hostplumbing.cgroup_pids(realcluster.node(cluster, name).cgroup_root)
    return listeners(pids)


def test_every_listener_is_loopback_only_or_answers_a_stranger_401(real_cluster):
    found = _cluster_listeners(real_cluster)
    for s in found:
        print(f"{s.process:16} {s.address}:{s.port:<6} anonymous: {stranger_answer(s.reach_at, s.port)}")
    assert unauthenticated(found) == []
    rn = realcluster.node(real_cluster, REAL_NODE)
    assert {(s.process, s.address) for s in found if not s.loopback} == {("kubelet", rn.node_ip)}
    unknown = sorted({f"{s.process} {s.address}:{s.port}" for s in found if s.loopback and s.process not in LOOPBACK})
    assert not unknown, f"loopback listeners whose authentication is not stated: {unknown}"
    wrong = []
    for s in (s for s in found if s.loopback):
        for path, stated in LOOPBACK_ANSWERS.get(s.process, {}).items():
            answer = anonymous_answer(s.reach_at, s.port, path)
            wrong += [f"{s.process} {path}: {answer}, stated {stated}"] if answer != stated else []
    assert not wrong, wrong
    assert {"etcd", "kube-apiserver", "kubelet"} <= {s.process for s in found}


def _https(port: int, path: str, ca, cert=None, host: str = "127.0.0.1") -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(cert.cert, cert.key)
    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    finally:
        conn.close()


def test_etcd_refuses_a_client_without_a_certificate_of_its_own_ca(real_cluster):
    pki, ports = PKI(real_cluster.state_dir / "pki"), real_cluster.state().ports
    for port in (ports["etcd"], ports["etcd_peer"]):
        assert anonymous_answer("127.0.0.1", port, "/version") == "tls requires a client certificate", port
    # A certificate of the cluster CA (the admin's, system:masters) is no key to etcd either.
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        _https(ports["etcd"], "/version", pki.etcd_ca_cert, pki.identity("admin"))
    # Positive control: the API server's etcd client certificate is served.
    status, body = _https(ports["etcd"], "/version", pki.etcd_ca_cert, pki.identity(APISERVER_ETCD_CLIENT))
    assert status == 200 and "etcdserver" in body


def test_the_kubelet_serves_a_certificate_for_its_node_ip_and_answers_only_clients_with_one(real_cluster):
    rn = realcluster.node(real_cluster, REAL_NODE)
    pki = PKI(real_cluster.state_dir / "pki")
    [port] = [s.port for s in _cluster_listeners(real_cluster) if s.process == "kubelet" and not s.loopback]
    assert anonymous_answer(rn.node_ip, port, "/pods") == "https 401"
    # Verified against the cluster CA with the node's IP as the host name, as the API server does.
    status, body = _https(port, "/pods", pki.ca_cert, pki.identity("admin"), host=rn.node_ip)
    assert status == 200 and '"kind":"PodList"' in body.replace(" ", "")


def test_negative_control_an_unauthenticated_listener_on_the_node_ip_is_flagged(real_cluster, tmp_path):
    rn = realcluster.node(real_cluster, REAL_NODE)
    (tmp_path / "pods").write_text("a pod list anyone may read\n")
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", rn.node_ip, "--directory", str(tmp_path), "0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not listening_sockets([server.pid]) and time.monotonic() < deadline:
            time.sleep(0.05)
        problems = unauthenticated(_cluster_listeners(real_cluster, [server.pid]))
        assert len(problems) == 1, problems
        assert f"on {rn.node_ip}:" in problems[0] and problems[0].endswith("answers a stranger: http 200")
    finally:
        server.kill()
        server.wait()
