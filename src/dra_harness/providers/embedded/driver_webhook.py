"""The example driver's validating webhook, as its chart runs it with ``webhook.enabled``.

The webhook rejects claims and templates whose opaque config for the driver is invalid (an
unknown time-slice interval, say) at the API server, before a pod waits on a claim the driver
would fail to prepare. Its chart needs cert-manager for a serving certificate; here the
cluster's own CA issues one for 127.0.0.1. The binary listens on ``:<port>`` without asking
callers for credentials, so it runs confined (:mod:`.confine`): in a network namespace of its
own, reached only through a port on the host's loopback. Its ValidatingWebhookConfiguration
covers only the namespace it is started for (a test's), so no other test's claims depend on
it, and carries the run's label, so a sweep removes it if the run dies first. Each namespace
gets a process and a certificate of its own: pytest-xdist workers share one cluster, and one
worker's ``stop`` must not end the webhook another worker's test is calling.
"""

from __future__ import annotations

import base64
import logging
import os
import ssl
import sys
import time
from pathlib import Path

from dra_harness.errors import ClusterError
from dra_harness.kube import rest
from dra_harness.labels import RUN_LABEL
from dra_harness.providers.embedded.cluster import LocalCluster, free_ports
from dra_harness.providers.embedded.pki import PKI
from dra_harness.retrying import NotYet, wait_answers

log = logging.getLogger(__name__)
PROCESS = "driver-webhook"
#: The port it binds inside its own network namespace; the host reaches it through another.
INNER_PORT = 8443
PATH = "/validate-resource-claim-parameters"
READY_DEADLINE_S = 30.0


def start(cluster: LocalCluster, namespace: str, run_id: str, driver: str = "gpu.example.com") -> str:
    """Run the webhook for ``driver`` and register it for claims in ``namespace``; returns the
    configuration's name once the webhook answers. Needs root (a network namespace of its own)."""
    st = cluster.state()
    if st is None:
        raise ClusterError(f"cluster {cluster.name!r} is not up")
    if os.geteuid() != 0:
        raise ClusterError("the driver's webhook needs root here: it listens on every interface, so it runs in a "
                           "network namespace of its own")
    binary = st.binaries.get("dra-example-webhook")
    if binary is None:
        raise ClusterError(f"cluster {cluster.name!r} was built without dra-example-webhook; recreate it")
    process = process_name(namespace)
    serving = PKI(cluster.state_dir / "pki").load().issue(process, PROCESS, hosts=("127.0.0.1",), client=False)
    port = free_ports([process])[process]
    argv = [sys.executable, "-m", "dra_harness.providers.embedded.confine", f"--listen={port}", f"--to={INNER_PORT}", "--",
            binary, f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}", f"--port={INNER_PORT}",
            f"--driver-name={driver}"]
    cluster.supervisor.start(process, argv)
    ca = cluster.state_dir / "pki" / "ca.crt"
    try:
        _wait_ready(port, ca)
    except NotYet:
        cluster.supervisor.stop(process, grace=1)
        raise ClusterError(f"the driver's webhook did not answer within {READY_DEADLINE_S:.0f} s; its log: "
                           f"{cluster.supervisor.log_tail(process, 5).strip()[-400:]}") from None
    name = f"{namespace}.{driver}"
    cluster.kube().create(rest.VALIDATING_WEBHOOK_CONFIGURATIONS, {
        "metadata": {"name": name, "labels": {RUN_LABEL: run_id}},
        "webhooks": [{
            "name": f"{namespace}.{driver}",
            "clientConfig": {"url": f"https://127.0.0.1:{port}{PATH}", "caBundle": base64.b64encode(ca.read_bytes()).decode()},
            "rules": [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1", "v1beta1", "v1beta2"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["resourceclaims", "resourceclaimtemplates"],
                       "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
        }],
    })
    return name


def stop(cluster: LocalCluster, name: str) -> None:
    """Unregister first (a configuration whose webhook is gone fails its namespace's claims), then stop it."""
    process = process_name(name.split(".", 1)[0])  # a namespace's name has no dot
    try:
        cluster.kube().delete(rest.VALIDATING_WEBHOOK_CONFIGURATIONS, name)
    finally:
        cluster.supervisor.stop(process, grace=5)
        identity = PKI(cluster.state_dir / "pki").identity(process)
        for path in (identity.cert, identity.key):
            path.unlink(missing_ok=True)


def process_name(namespace: str) -> str:
    """The supervisor's name for the webhook serving ``namespace``."""
    return f"{PROCESS}-{namespace}"


def _wait_ready(port: int, ca_file: Path) -> None:
    wait_answers(f"https://127.0.0.1:{port}/readyz", time.monotonic() + READY_DEADLINE_S, 0.2, log,
                 "the driver's webhook to answer", ssl.create_default_context(cafile=str(ca_file)))
