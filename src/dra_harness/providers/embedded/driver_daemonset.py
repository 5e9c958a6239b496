"""The example driver on a real node as a DaemonSet's pod, and that DaemonSet's rolling update.

Why: a real cluster runs its DRA driver as a DaemonSet and upgrades it by changing the image.
How the rollout replaces the pod decides what the node goes through: with the chart's surge the
new plugin registers beside the old one (under its pod UID) before the old pod goes; with a
DaemonSet's default the old pod goes first (the kubelet stops it; the plugin deregisters) and the
node has no driver until the new one registers. What the kubelet does with the node's
ResourceSlices, prepared claims and new pods meanwhile is what a team must know. A process swap
does not show that; a real node running the pod does.

The DaemonSet is pinned to one real node: every real node of the embedded cluster is the same
host, so a hostPath (the kubelet's root, the CDI directory) can name only one node's directories.
A driver configuration (:mod:`dra_harness.providers.driver_configs`) reaches the pod the way an
operator's values change does: the pod template changes and the DaemonSet rolls the pod.
"""

from __future__ import annotations

import time
from pathlib import Path

from dra_harness.components import images
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.kube.waits import watch_until
from dra_harness.providers import driver_configs, driver_manifests
from dra_harness.providers.embedded import realcluster
from dra_harness.providers.embedded.core import DriverHost
from dra_harness.providers.localstate import DRIVER_DAEMONSET_STRATEGIES
from dra_harness.providers.profiles import EXAMPLE_DRIVER
from dra_harness.errors import ClusterError

NAME = "dra-example-driver-kubeletplugin"
CONTAINER = "plugin"
ROLLOUT_DEADLINE_S = 180.0
CONFIG_ANNOTATION = "dra-harness.io/driver-config"
#: How a roll replaces the pod: the chart's (the new pod beside the old, which goes once the new one is
#: ready) or a DaemonSet's default (the old pod goes first; the node has no driver until the new one registers).
STRATEGIES = DRIVER_DAEMONSET_STRATEGIES


def image_for(cluster: DriverHost, node: str, version: str, plugin: str) -> str:
    """The driver image of release ``version`` (``plugin``: that release's binary), imported into ``node``."""
    st = cluster.state()
    if st is None:
        raise ClusterError(f"cluster {cluster.name!r} is not up")
    image = images.driver_image(Path(plugin), version)
    realcluster.import_images(cluster, st, node, [images.tarball(image)])
    return image.name


def install(cluster: DriverHost, kube: Kube, node: str, version: str, plugin: str, strategy: str = "surge") -> list[Obj]:
    """Replace real node ``node``'s driver process by the DaemonSet (release ``version``) the driver's own
    manifests describe, pinned to that node, rolled by ``strategy`` (:data:`STRATEGIES`); returns the
    documents applied. Waits until its pod runs and the node publishes all its devices again."""
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
            doc["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": STRATEGIES[strategy]}
    driver_manifests.apply(kube, docs)
    _wait_serving(kube, node, image, st.spec.gpus_per_node, time.monotonic() + ROLLOUT_DEADLINE_S)
    return docs


def roll(cluster: DriverHost, kube: Kube, node: str, version: str, plugin: str) -> tuple[float, float]:
    """Change the DaemonSet's image to release ``version``, as an operator upgrades a driver, and follow the
    rollout on ``node``. Returns the seconds until the old pod was gone and from then until the new one
    ran with the node's devices published. The kubelet keeps a node's slices for a while after its
    plugin goes, and its registration of the new one is not visible in the API: whether the node
    prepares claims again is for a pod with a claim there to show."""
    st = cluster.state()
    if st is None or node not in st.driver_pods:
        raise ClusterError(f"the driver on {node} is not a DaemonSet's pod; install it first")
    image = image_for(cluster, node, version, plugin)
    old = {p["metadata"]["uid"] for p in _pods(kube, node)}
    started = time.monotonic()
    # The annotation is kubectl's ``rollout restart``: the same release is rolled too (a restart in place).
    template = {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": _now()}},
                "spec": {"containers": [{"name": CONTAINER, "image": image}]}}
    kube.patch(rest.DAEMON_SETS, NAME, {"spec": {"template": template}}, driver_manifests.NAMESPACE, kind="strategic")
    seen: dict[str, float] = {}  # when the old pods were gone, and when the new one ran

    def rolled(pods: list[Obj]) -> bool:
        now = time.monotonic()
        if not any(p["metadata"]["uid"] in old for p in pods):
            seen.setdefault("gone", now)
        if any(_running(p, image) and p["metadata"]["uid"] not in old for p in pods):
            seen.setdefault("running", now)
        return len(seen) == 2

    watch_until(kube, rest.PODS, rolled, ROLLOUT_DEADLINE_S, f"the driver DaemonSet's roll to {image} on {node}",
                namespace=driver_manifests.NAMESPACE, field_selector=f"spec.nodeName={node}", why=_describe)
    _wait_serving(kube, node, image, st.spec.gpus_per_node, time.monotonic() + ROLLOUT_DEADLINE_S)
    cluster.record_swap(f"driver-{node}", {"version": version, "image": image})
    # With a surge the new pod runs before the old one goes: no time without a driver pod.
    return seen["gone"] - started, max(0.0, seen["running"] - seen["gone"])


def configure(cluster: DriverHost, kube: Kube, node: str, config: str) -> float:
    """Bring the DaemonSet's plugin into ``config``: the pod template gets the flags the process form passes
    (a Helm values change does the same through environment variables), the DaemonSet rolls the pod, and
    where the driver name changes (another device profile) the old driver's slices of the node are removed,
    as the process form does. Returns the seconds until the new pod ran; the caller waits for its slices."""
    st = cluster.state()
    if st is None or node not in st.driver_pods:
        raise ClusterError(f"the driver on {node} is not a DaemonSet's pod")
    wanted = driver_configs.by_name(config)
    before = driver_configs.by_name(st.driver_configs.get(node, "default"))
    pods = _pods(kube, node)
    if not pods:
        raise ClusterError(f"no pod of DaemonSet {driver_manifests.NAMESPACE}/{NAME} runs on {node}")
    image = pods[0]["spec"]["containers"][0]["image"]
    old = {p["metadata"]["uid"] for p in pods}
    started = time.monotonic()
    # Back to default removes what a configuration added, leaving the template as install() made it.
    default = config == "default"
    template = {"metadata": {"annotations": {CONFIG_ANNOTATION: None if default else config}},
                "spec": {"containers": [{"name": CONTAINER, "args": None if default else wanted.args()}]}}
    kube.patch(rest.DAEMON_SETS, NAME, {"spec": {"template": template}}, driver_manifests.NAMESPACE, kind="strategic")
    cluster.record_driver_config(node, config)
    watch_until(kube, rest.PODS, lambda ps: any(_running(p, image) and p["metadata"]["uid"] not in old for p in ps)
                and not any(p["metadata"]["uid"] in old for p in ps), ROLLOUT_DEADLINE_S,
                f"the driver DaemonSet's pod on {node} to roll into configuration {config}",
                namespace=driver_manifests.NAMESPACE, field_selector=f"spec.nodeName={node}", why=_describe)
    took = time.monotonic() - started
    if before.driver != wanted.driver:
        for s in kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={before.driver},spec.nodeName={node}"):
            kube.delete(rest.RESOURCE_SLICES, s["metadata"]["name"])
    return took


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _pods(kube: Kube, node: str) -> list[Obj]:
    return kube.list(rest.PODS, driver_manifests.NAMESPACE, label_selector=driver_manifests.POD_SELECTOR,
                     field_selector=f"spec.nodeName={node}")


def _running(pod: Obj, image: str) -> bool:
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in pod["status"].get("conditions") or [])
    return pod["spec"]["containers"][0]["image"] == image and ready and not pod["metadata"].get("deletionTimestamp")


def _describe(pods: list[Obj]) -> str:
    return "; ".join(f"{p['metadata']['name']} ({p['spec']['containers'][0]['image']}): {p['status'].get('phase')}"
                     + (", terminating" if p["metadata"].get("deletionTimestamp") else "") for p in pods) or "no driver pod on the node"


def _wait_serving(kube: Kube, node: str, image: str, devices: int, deadline: float) -> None:
    watch_until(kube, rest.PODS, lambda pods: any(_running(p, image) for p in pods), max(1.0, deadline - time.monotonic()),
                f"the driver DaemonSet's pod with {image} to run on {node}", namespace=driver_manifests.NAMESPACE,
                field_selector=f"spec.nodeName={node}", why=_describe)

    def published(slices: list[Obj]) -> bool:
        return sum(len(s["spec"].get("devices") or []) for s in slices if s["spec"].get("nodeName") == node) == devices

    watch_until(kube, rest.RESOURCE_SLICES, published, max(1.0, deadline - time.monotonic()),
                f"{node} to publish its {devices} devices from the DaemonSet's pod", field_selector=f"spec.driver={EXAMPLE_DRIVER}")
