"""Simulated nodes whose GPUs carry topology attributes, as drivers for real GPUs publish them.

The example driver publishes no topology, so co-placement on it can only be checked by node.
Drivers for real GPUs (NVIDIA's among them) publish the standard ``resource.kubernetes.io/pcieRoot``;
tensor-parallel jobs constrain on it (and on NVLink-style domains) so that shards talk over the
fastest path. Here one KWOK node per use carries a fixed layout, the hardware's truth:

- 8 GPUs, PCIe root ``pci0000:00`` for GPUs 0-3 and ``pci0000:80`` for GPUs 4-7;
- NVLink-style domains crossing the roots: ``nvl-a`` = GPUs 0, 1, 4, 5 and ``nvl-b`` = 2, 3, 6, 7,

so one root holds 4 GPUs, one domain 4, and a root and a domain together 2. A fleet of several
nodes gives each its own GPU model (``models``) and a DeviceClass per model besides the one for
all, which is how replicas come to hold different hardware. The checks compare
allocations with this layout, never with the slice: the ``flat-root`` fault publishes one root for
every GPU (a driver that reports topology wrongly), and the scheduler then honours a constraint
the hardware does not.
"""

from __future__ import annotations

import uuid

from dra_harness.kube import builders, rest
from dra_harness.kube.pods import wait_nodes_ready
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.labels import RUN_LABEL, SIMULATED_NODE_LABEL
from dra_harness.labels import KWOK_ANNOTATION

DRIVER = "topology.dra-harness.io"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NVLINK_DOMAIN = f"{DRIVER}/nvlinkDomain"
TAG_LABEL = "dra-harness.io/topology"
TAINT_KEY = "dra-harness.io/topology"
GPUS = 8
ROOTS = ("pci0000:00", "pci0000:80")
FAULTS = ("flat-root",)


def root_of(gpu: int) -> str:
    return ROOTS[gpu // 4]


def domain_of(gpu: int) -> str:
    return "nvl-a" if gpu % 4 < 2 else "nvl-b"


def gpu_of(device: str) -> int:
    """``gpu-5`` -> 5."""
    return int(device.rsplit("-", 1)[1])


class TopologyFleet:
    """Simulated nodes (one per model) of ``gpus`` GPUs with topology, their slices and DeviceClasses,
    named by a fresh tag."""

    def __init__(self, kube: Kube, run_id: str, faults: tuple[str, ...] = (),
                 kwok: tuple[str, str] = (KWOK_ANNOTATION, "fake"), models: tuple[str, ...] = ("SIM-GPU",),
                 gpus: int = GPUS) -> None:
        if unknown := set(faults) - set(FAULTS):
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {', '.join(FAULTS)}")
        self.kube, self.run_id, self.faults, self.kwok, self.models, self.gpus = kube, run_id, faults, kwok, models, gpus
        self.tag = f"{run_id[:4]}{uuid.uuid4().hex[:4]}"
        self.nodes = [f"topo-{self.tag}-{i}" for i in range(len(models))]
        self.device_class = f"topo-{self.tag}"

    @property
    def node(self) -> str:
        return self.nodes[0]

    @property
    def labels(self) -> dict[str, str]:
        # SIMULATED_NODE_LABEL lets the run's sweep delete the nodes (and only ours) after a crash.
        return {RUN_LABEL: self.run_id, TAG_LABEL: self.tag, SIMULATED_NODE_LABEL: self.tag}

    def model_class(self, model: str) -> str:
        return f"topo-{self.tag}-{model.lower()}"

    def node_body(self, node: str) -> Obj:
        return builders.simulated_node(node, self.labels, {"key": TAINT_KEY, "value": self.tag, "effect": "NoSchedule"}, self.kwok)

    def node_bodies(self) -> list[Obj]:
        return [self.node_body(n) for n in self.nodes]

    def create(self, timeout: float = 120.0) -> None:
        run = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].run == '{self.tag}'"
        for node, model in zip(self.nodes, self.models, strict=True):
            self.kube.create(rest.NODES, self.node_body(node))
            self.kube.create(rest.RESOURCE_SLICES, {"metadata": {"name": node, "labels": self.labels}, "spec": {
                "driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [self._device(g, model) for g in range(self.gpus)]}})
        classes = {self.device_class: run}
        if len(self.models) > 1:
            classes |= {self.model_class(m): f"{run} && device.attributes['{DRIVER}'].model == '{m}'" for m in self.models}
        for name, selector in classes.items():
            self.kube.create(rest.DEVICE_CLASSES, {"metadata": {"name": name, "labels": self.labels},
                                                   "spec": {"selectors": [builders.cel(selector)]}})
        wait_nodes_ready(self.kube, set(self.nodes), f"{TAG_LABEL}={self.tag}", timeout, "simulated topology nodes")

    def delete(self) -> None:
        for res in (rest.RESOURCE_SLICES, rest.NODES, rest.DEVICE_CLASSES):
            for obj in self.kube.list(res, label_selector=f"{TAG_LABEL}={self.tag}"):
                self.kube.delete(res, obj["metadata"]["name"])

    def taint(self, gpu: int, effect: str, key: str, value: str, node: int = 0) -> Obj:
        """Publish a taint on one GPU in its slice, as a driver reports a device it found unhealthy; the slice."""
        patch = [{"op": "add", "path": f"/spec/devices/{gpu}/taints",
                  "value": [{"key": key, "value": value, "effect": effect}]}]
        return self.kube.patch(rest.RESOURCE_SLICES, self.nodes[node], patch, kind="json")

    def toleration(self) -> Obj:
        return {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}

    def _device(self, gpu: int, model: str) -> Obj:
        root = ROOTS[0] if "flat-root" in self.faults else root_of(gpu)
        return {"name": f"gpu-{gpu}", "attributes": {
            "index": {"int": gpu}, "run": {"string": self.tag}, "model": {"string": model},
            PCIE_ROOT: {"string": root}, NVLINK_DOMAIN: {"string": domain_of(gpu)}},
            "capacity": {"memory": {"value": "80Gi"}}}

    def claim_template(self, name: str, count: int, match: tuple[str, ...]) -> Obj:
        return builders.claim_template(name, self.run_id, [builders.exactly("gpu", self.device_class, count)],
                                       constraints=[{"matchAttribute": a} for a in match])

    def pod(self, name: str, template: str) -> Obj:
        body = builders.pod(name, self.run_id, claims={"gpu": {"template": template}})
        body["spec"]["tolerations"] = [self.toleration()]
        body["spec"]["nodeSelector"] = {TAG_LABEL: self.tag}
        return body
