"""The example driver installed the way kind and real clusters run it: a DaemonSet.

One multi-document YAML (``data/kind/manifests/dra-example-driver.yaml``) serves the
embedded cluster's real nodes and kind clusters alike; only the image, the
kubelet's root directory and containerd's CDI directory differ, so those are
placeholders filled here rather than three near-identical copies.
"""

from __future__ import annotations

from string import Template

import yaml

from dra_harness import data
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.errors import ClusterError

MANIFEST = data.path("kind", "manifests", "dra-example-driver.yaml")
NAMESPACE = "dra-example-driver"
POD_SELECTOR = "app.kubernetes.io/name=dra-example-driver,app.kubernetes.io/component=kubeletplugin"


class ManifestError(ClusterError):
    """The manifest file is missing or a placeholder was left unfilled (one line for the CLI)."""


def render_driver_manifests(image: str, kubelet_root: str, cdi_root: str = "/var/run/cdi") -> list[dict]:
    """The manifest's documents with ``${DRIVER_IMAGE}``, ``${KUBELET_ROOT}`` and ``${CDI_ROOT}`` filled."""
    if not image or not kubelet_root.startswith("/") or not cdi_root.startswith("/"):
        raise ManifestError(f"need an image and absolute paths; got image={image!r} kubelet_root={kubelet_root!r} cdi_root={cdi_root!r}")
    try:
        text = MANIFEST.read_text()
    except OSError as e:
        raise ManifestError(f"cannot read {MANIFEST}: {e.strerror}") from e
    try:
        filled = Template(text).substitute(
            DRIVER_IMAGE=image, KUBELET_ROOT=kubelet_root.rstrip("/") or "/", CDI_ROOT=cdi_root
        )
    except (KeyError, ValueError) as e:
        raise ManifestError(f"{MANIFEST}: unknown placeholder {e}") from e
    return [d for d in yaml.safe_load_all(filled) if d]


def for_embedded(docs: list[dict], apiserver_port: int, devices: int) -> None:
    """Point the plugin at the embedded API server and set its device count, in place.

    The embedded API server listens on 127.0.0.1 only and there is no kube-proxy for its
    Service, so the host-network plugin is told the address directly.
    """
    for doc in docs:
        if doc["kind"] != "DaemonSet":
            continue
        container = doc["spec"]["template"]["spec"]["containers"][0]
        env = [e for e in container["env"] if e["name"] not in ("NUM_DEVICES", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")]
        container["env"] = env + [
            {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
            {"name": "KUBERNETES_SERVICE_PORT", "value": str(apiserver_port)},
            {"name": "NUM_DEVICES", "value": str(devices)},
        ]


RESOURCES = {
    "Namespace": rest.NAMESPACES,
    "ServiceAccount": rest.SERVICE_ACCOUNTS,
    "ClusterRole": rest.CLUSTER_ROLES,
    "ClusterRoleBinding": rest.CLUSTER_ROLE_BINDINGS,
    "DaemonSet": rest.DAEMON_SETS,
}


def apply(kube: Kube, docs: list[dict]) -> None:
    """Create the documents in order (namespace first)."""
    for doc in docs:
        kube.create(RESOURCES[doc["kind"]], doc, doc["metadata"].get("namespace"))


def delete(kube: Kube, docs: list[dict]) -> None:
    """Delete the documents in reverse order; absent ones are fine."""
    for doc in reversed(docs):
        try:
            kube.delete(RESOURCES[doc["kind"]], doc["metadata"]["name"], doc["metadata"].get("namespace"))
        except rest.NotFound:
            pass
