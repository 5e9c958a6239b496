"""The driver's validating webhook, as its chart runs it with ``webhook.enabled``.

The cluster's driver decides which: the example driver's ``dra-example-webhook`` (told the
driver name it checks) or NVIDIA's ``webhook`` (it checks ``gpu.nvidia.com`` configs, fixed in
its source), of the release the nodes run.

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

A configuration the API server has stored is not yet one it calls: its informer lags, by
seconds on a loaded machine, and a claim created meanwhile is admitted unchecked (a false
FAIL of the refusal check). So the configuration carries a second webhook that refuses one
marker ConfigMap of the namespace, and ``start`` returns only once a dry run of that marker is
refused: the API server then calls this configuration's webhooks. The marker never asks the
driver's webhook anything, so a webhook that admits what it should refuse still fails its check.
"""

from __future__ import annotations

import base64
import logging
import os
import ssl
import sys
import time
from pathlib import Path

from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.errors import ClusterError
from dra_harness.kube import rest
from dra_harness.labels import RUN_LABEL
from dra_harness.providers.embedded import commands, nvidia_driver
from dra_harness.providers.embedded import ports as port_registry
from dra_harness.providers.embedded.cluster import LocalCluster
from dra_harness.providers.embedded.pki import PKI
from dra_harness.providers.localstate import ClusterState
from dra_harness.retrying import NotYet, until, wait_answers

log = logging.getLogger(__name__)
PROCESS = "driver-webhook"
#: The port it binds inside its own network namespace; the host reaches it through another.
INNER_PORT = 8443
PATH = "/validate-resource-claim-parameters"
READY_DEADLINE_S = 30.0
#: Labels the marker ConfigMap whose refusal shows the configuration is in effect.
MARKER_LABEL = "dra-harness.io/webhook-marker"
#: A path the driver's webhook does not serve: calling it fails, which refuses the marker.
MARKER_PATH = "/dra-harness-marker"


def start(cluster: LocalCluster, namespace: str, run_id: str, driver: str | None = None) -> str:
    """Run the webhook of ``driver`` (default: the cluster's) and register it for claims in ``namespace``;
    returns the configuration's name once the webhook answers. Needs root (a network namespace of its own)."""
    st = cluster.state()
    if st is None:
        raise ClusterError(f"cluster {cluster.name!r} is not up")
    if os.geteuid() != 0:
        raise ClusterError("the driver's webhook needs root here: it listens on every interface, so it runs in a "
                           "network namespace of its own")
    driver = driver or st.spec.driver_name
    command = _command(st, driver)
    process = process_name(namespace)
    serving = PKI(cluster.state_dir / "pki").load().issue(process, PROCESS, hosts=("127.0.0.1",), client=False)
    port = port_registry.take([process])[process]
    argv = [sys.executable, "-m", "dra_harness.providers.embedded.confine", f"--listen={port}", f"--to={INNER_PORT}", "--",
            *command, f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}", f"--port={INNER_PORT}"]
    cluster.supervisor.start(process, argv)
    ca = cluster.state_dir / "pki" / "ca.crt"
    try:
        _wait_ready(port, ca)
    except NotYet:
        cluster.supervisor.stop(process, grace=1)
        raise ClusterError(f"the driver's webhook did not answer within {READY_DEADLINE_S:.0f} s; its log: "
                           f"{cluster.supervisor.log_tail(process, 5).strip()[-400:]}") from None
    name = f"{namespace}.{driver}"
    ca_bundle = base64.b64encode(ca.read_bytes()).decode()
    kube = cluster.kube()
    kube.create(rest.VALIDATING_WEBHOOK_CONFIGURATIONS, {
        "metadata": {"name": name, "labels": {RUN_LABEL: run_id}},
        "webhooks": [
            _webhook(f"{namespace}.{driver}", f"https://127.0.0.1:{port}{PATH}", ca_bundle, namespace,
                     {"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1", "v1beta1", "v1beta2"],
                      "operations": ["CREATE", "UPDATE"], "resources": ["resourceclaims", "resourceclaimtemplates"],
                      "scope": "Namespaced"}),
            {**_webhook(f"marker.{namespace}.{driver}", f"https://127.0.0.1:{port}{MARKER_PATH}", ca_bundle, namespace,
                        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"],
                         "scope": "Namespaced"}),
             "objectSelector": {"matchLabels": {MARKER_LABEL: "true"}}},
        ],
    })
    try:
        wait_in_effect(kube, namespace)
    except ClusterError:
        stop(cluster, name)
        raise
    return name


def _command(st: ClusterState, driver: str) -> list[str]:
    """The webhook binary of ``driver``, with the flags that differ between the two drivers."""
    if driver == nvidia_driver.DRIVER:
        component = catalog.nvidia_driver(st.spec.nvidia_version)
        # The chart passes its featureGates to the webhook too: with TimeSlicingSettings off it refuses every interval.
        return [str(builder.build_all([component], quiet=True)[component.dirname].binary("webhook")),
                f"--feature-gates={commands.NVIDIA_PLUGIN_GATES}"]
    binary = st.binaries.get("dra-example-webhook")
    if binary is None:
        raise ClusterError("the cluster was built without dra-example-webhook; recreate it")
    return [binary, f"--driver-name={driver}"]


def _webhook(name: str, url: str, ca_bundle: str, namespace: str, rule: dict) -> dict:
    return {
        "name": name,
        "clientConfig": {"url": url, "caBundle": ca_bundle},
        "rules": [rule],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 10,
    }


def _marker_refused(kube: rest.Kube, namespace: str) -> bool:
    """Whether the API server calls the namespace's marker webhook now (a dry run, stored nowhere)."""
    marker = {"metadata": {"name": "dra-harness-webhook-marker", "labels": {MARKER_LABEL: "true"}}}
    try:
        kube.create(rest.CONFIG_MAPS, marker, namespace, dry_run=True)
    except rest.ApiError as e:
        if f"marker.{namespace}." in e.message:
            return True
        if e.status == 404 or "being terminated" in e.message:  # the namespace is going: nothing of it is called
            return False
        raise NotYet(f"the marker's dry run failed otherwise: {e}") from None
    return False


def wait_in_effect(kube: rest.Kube, namespace: str, deadline_s: float = READY_DEADLINE_S, gone: bool = False) -> float:
    """Until the API server calls the namespace's webhooks (``gone``: until it no longer does).
    Returns the seconds that took; ClusterError past ``deadline_s``."""
    started = time.monotonic()

    def settled() -> None:
        if _marker_refused(kube, namespace) == gone:
            raise NotYet(f"the API server {'still' if gone else 'does not yet'} call(s) the configuration's webhooks")

    try:
        until(started + deadline_s, 0.2, log, "the webhook's configuration to take effect")(settled)
    except NotYet as e:
        raise ClusterError(f"the driver's webhook configuration did not {'go' if gone else 'take effect'} "
                           f"within {deadline_s:.0f} s: {e}") from None
    return time.monotonic() - started


def stop(cluster: LocalCluster, name: str) -> None:
    """Unregister first (a configuration whose webhook is gone fails its namespace's claims), then stop it."""
    process = process_name(name.split(".", 1)[0])  # a namespace's name has no dot
    try:
        cluster.kube().delete(rest.VALIDATING_WEBHOOK_CONFIGURATIONS, name)
        # Until the API server stops calling it, a claim of the namespace would fail on the stopped webhook.
        try:
            wait_in_effect(cluster.kube(), name.split(".", 1)[0], deadline_s=10, gone=True)
        except ClusterError as e:
            log.warning("%s", e)
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
