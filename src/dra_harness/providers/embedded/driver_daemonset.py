"""The example driver on a real node as a DaemonSet's pod, and that DaemonSet's rolling update.

Why: a real cluster runs its DRA driver as a DaemonSet and upgrades it by changing the image.
The rollout then deletes the old pod (the kubelet stops its container; the plugin deregisters)
before it creates the new one (``maxUnavailable: 1``, no surge), so the node has no driver for a
while, and what the kubelet does with the node's ResourceSlices and prepared claims meanwhile is
what a team must know. A process swap does not show that; a real node running the pod does.

The DaemonSet is pinned to one real node: every real node of the embedded cluster is the same
host, so a hostPath (the kubelet's root, the CDI directory) can name only one node's directories.
"""

from __future__ import annotations

import time
from pathlib import Path

from dra_harness.components import images
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.kube.waits import wait_for_deletion, watch_until
from dra_harness.providers import driver_manifests
from dra_harness.providers.embedded import realcluster
from dra_harness.providers.embedded.cluster import DRIVER_NAME, LocalCluster
from dra_harness.errors import ClusterError

NAME = "dra-example-driver-kubeletplugin"
CONTAINER = "plugin"
ROLLOUT_DEADLINE_S = 180.0


def image_for(cluster: LocalCluster, node: str, version: str, plugin: str) -> str:
    """The driver image of release ``version`` (``plugin``: that release's binary), imported into ``node``."""
    st = cluster.state()
    if st is None:
        raise ClusterError(f"cluster {cluster.name!r} is not up")
    image = images.driver_image(Path(plugin), version)
    realcluster.import_images(cluster, st, node, [images.tarball(image)])
    return image.name


def install(cluster: LocalCluster, kube: Kube, node: str, version: str, plugin: str) -> list[Obj]:
    """Replace real node ``node``'s driver process by the DaemonSet (release ``version``) the driver's own
    manifests describe, pinned to that node; returns the documents applied. Waits until its pod runs
    and the node publishes all its devices again."""
    st = cluster.state()
    if st is None:
        raise ClusterError(f"cluster {cluster.name!r} is not up")
    image = image_for(cluster, node, version, plugin)
    cluster.hand_driver_to_pod(node)
    rn = realcluster.node(cluster, node)
    docs = driver_manifests.render_driver_manifests(image, str(rn.kubelet_root), cdi_root=str(rn.cdi_dir))
    driver_manifests.for_embedded(docs, st.ports["apiserver"], st.spec.gpus_per_node)
    for doc in docs:
        if doc["kind"] == "DaemonSet":
            doc["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    driver_manifests.apply(kube, docs)
    _wait_serving(kube, node, image, st.spec.gpus_per_node, time.monotonic() + ROLLOUT_DEADLINE_S)
    return docs


def roll(cluster: LocalCluster, kube: Kube, node: str, version: str, plugin: str) -> tuple[float, float]:
    """Change the DaemonSet's image to release ``version``, as an operator upgrades a driver, and follow the
    rollout on ``node``. Returns the seconds until the old pod was gone and from then until the new one
    ran and the node published all its devices."""
    st = cluster.state()
    if st is None or node not in st.driver_pods:
        raise ClusterError(f"the driver on {node} is not a DaemonSet's pod; install it first")
    image = image_for(cluster, node, version, plugin)
    old = _pod(kube, node)
    started = time.monotonic()
    # The annotation is kubectl's ``rollout restart``: the same release is rolled too (a restart in place).
    template = {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": _now()}},
                "spec": {"containers": [{"name": CONTAINER, "image": image}]}}
    kube.patch(rest.DAEMON_SETS, NAME, {"spec": {"template": template}}, driver_manifests.NAMESPACE, kind="strategic")
    if old is not None:
        wait_for_deletion(kube, rest.PODS, old["metadata"]["name"], ROLLOUT_DEADLINE_S, driver_manifests.NAMESPACE)
    stopped = time.monotonic()
    _wait_serving(kube, node, image, st.spec.gpus_per_node, stopped + ROLLOUT_DEADLINE_S)
    cluster.record_swap(f"driver-{node}", {"version": version, "image": image})
    return stopped - started, time.monotonic() - stopped


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _pod(kube: Kube, node: str) -> Obj | None:
    pods = kube.list(rest.PODS, driver_manifests.NAMESPACE, label_selector=driver_manifests.POD_SELECTOR,
                     field_selector=f"spec.nodeName={node}")
    return pods[0] if pods else None


def _wait_serving(kube: Kube, node: str, image: str, devices: int, deadline: float) -> None:
    def running(pods: list[Obj]) -> bool:
        return any(p["spec"]["containers"][0]["image"] == image and p["status"].get("phase") == "Running"
                   and not p["metadata"].get("deletionTimestamp") for p in pods)

    def why(pods: list[Obj]) -> str:
        return "; ".join(f"{p['metadata']['name']} ({p['spec']['containers'][0]['image']}): {p['status'].get('phase')}"
                         for p in pods) or "no driver pod on the node"

    watch_until(kube, rest.PODS, running, max(1.0, deadline - time.monotonic()),
                f"the driver DaemonSet's pod with {image} to run on {node}", namespace=driver_manifests.NAMESPACE,
                field_selector=f"spec.nodeName={node}", why=why)

    def published(slices: list[Obj]) -> bool:
        return sum(len(s["spec"].get("devices") or []) for s in slices if s["spec"].get("nodeName") == node) == devices

    watch_until(kube, rest.RESOURCE_SLICES, published, max(1.0, deadline - time.monotonic()),
                f"{node} to publish its {devices} devices from the DaemonSet's pod", field_selector=f"spec.driver={DRIVER_NAME}")
