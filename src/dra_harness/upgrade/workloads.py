"""The workloads an upgrade is performed under: every kind of claim a cluster holds in production.

An 8-device tensor-parallel claim (a whole node), pods from a claim template, one claim shared
by three pods, a claim with the driver's opaque configuration, and on each real node pods whose
containers run (a template claim and a shared one). They are created and Running before the
first component is touched; :mod:`dra_harness.upgrade.snapshot` then watches them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from dra_harness.kube import builders, rest
from dra_harness.kube.events import events_for
from dra_harness.kube.pods import wait_running
from dra_harness.kube.rest import Kube
from dra_harness.kube.rules import PAUSE_IMAGE
from dra_harness.kube.waits import wait_for_deletion, watch_until
from dra_harness.errors import HarnessError
from dra_harness.labels import RUN_LABEL
from dra_harness.providers.hardware import devices_by_node

DEVICE_CLASS = "gpu.example.com"
#: The example driver's opaque parameters: time-slicing settings the driver writes into the container's env.
GPU_CONFIG = [{"requests": ["gpu"], "opaque": {"driver": DEVICE_CLASS, "parameters": {
    "apiVersion": "gpu.resource.example.com/v1alpha1", "kind": "GpuConfig",
    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}}}]
RUNNING_DEADLINE_S = 120.0


@dataclass(frozen=True)
class Workloads:
    namespace: str
    run_id: str
    #: Pods whose containers run on a real node (their container IDs are the ones that count).
    real_pods: tuple[str, ...]
    devices_per_node: int = 8


def request(count: int = 1, device_class: str = DEVICE_CLASS) -> dict:
    return builders.exactly("gpu", device_class, count)


def create(kube: Kube, run_id: str, namespace: str, real_nodes: list[str], devices_per_node: int) -> Workloads:
    """Create the workloads and return once every pod is Running."""
    kube.create(rest.NAMESPACES, {"metadata": {"name": namespace, "labels": {RUN_LABEL: run_id}}})
    pods: list[str] = []

    def pod(name: str, claims: dict[str, dict[str, str]], node: str | None = None) -> None:
        kube.create(rest.PODS, builders.pod(name, run_id, claims=claims, node_name=node), namespace)
        pods.append(name)

    # The whole-node claim first, while every simulated node still has all its devices free.
    kube.create(rest.RESOURCE_CLAIMS, builders.claim("tensor-parallel", run_id, [request(devices_per_node)]), namespace)
    pod("tensor-parallel-0", {"gpu": {"claim": "tensor-parallel"}})
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, builders.claim_template("one-gpu", run_id, [request()]), namespace)
    kube.create(rest.RESOURCE_CLAIMS, builders.claim("shared", run_id, [request()]), namespace)
    kube.create(rest.RESOURCE_CLAIMS, builders.claim("configured", run_id, [request()], config=GPU_CONFIG), namespace)
    for i in range(2):
        pod(f"template-{i}", {"gpu": {"template": "one-gpu"}})
    for i in range(3):
        pod(f"shared-{i}", {"gpu": {"claim": "shared"}})
    pod("configured-0", {"gpu": {"claim": "configured"}})
    real: list[str] = []
    for node in real_nodes:
        kube.create(rest.RESOURCE_CLAIMS, builders.claim(f"shared-{node}", run_id, [request()]), namespace)
        for name, claims in ((f"template-{node}", {"gpu": {"template": "one-gpu"}}),
                             *((f"shared-{node}-{i}", {"gpu": {"claim": f"shared-{node}"}}) for i in range(2))):
            pod(name, claims, node)
            real.append(name)
    for name in pods:
        wait_running(kube, namespace, name, RUNNING_DEADLINE_S)
    # The simulated pods must not land on a real node (its containers would count as real ones).
    for name in set(pods) - set(real):
        node = kube.get(rest.PODS, name, namespace)["spec"]["nodeName"]
        labels = kube.get(rest.NODES, node)["metadata"].get("labels", {})
        if labels.get("type") != "kwok":
            real.append(name)
    return Workloads(namespace, run_id, tuple(sorted(real)), devices_per_node)


def probe(kube: Kube, run_id: str, namespace: str, name: str, node: str | None = None,
          timeout: float = RUNNING_DEADLINE_S, image: str = PAUSE_IMAGE, warnings: list[str] | None = None) -> float:
    """A new pod with a new claim from the template: seconds until it runs, then it is removed. The
    pod's Warning events (why it was slow) are appended to ``warnings`` when given."""
    started = time.monotonic()
    kube.create(rest.PODS, builders.pod(name, run_id, claims={"gpu": {"template": "one-gpu"}}, node_name=node,
                                        image=image), namespace)
    try:
        wait_running(kube, namespace, name, timeout)
    except HarnessError:
        kube.delete(rest.PODS, name, namespace)  # or it would take a device once it can
        raise
    took = time.monotonic() - started
    if warnings is not None:
        warnings += [f"{name}: {e.get('reason')}: {e.get('message', '')[:200]}"
                     for e in events_for(kube, namespace, name) if e.get("type") == "Warning"]
    # A graceful delete: the pod is gone once its kubelet has stopped it and the driver unprepared its claim.
    kube.delete(rest.PODS, name, namespace)
    wait_for_deletion(kube, rest.PODS, name, timeout, namespace)
    return took


def wait_published(kube: Kube, node: str, devices: int, deadline: float) -> float:
    """Until ``node`` publishes all its ``devices`` again; returns the seconds waited."""
    started = time.monotonic()
    watch_until(kube, rest.RESOURCE_SLICES, lambda ss: len(devices_by_node(ss, DEVICE_CLASS).get(node, [])) == devices,
                max(1.0, deadline - started), f"{node} to publish its {devices} devices")
    return time.monotonic() - started
