"""The scenario's cluster shape and each design, made of real API objects.

Simulated nodes are KWOK nodes; their devices are published by the harness itself as
node-local ResourceSlices of the driver ``contention.dra-harness.io``. On a KWOK node no
kubelet ever calls a DRA plugin, so a plugin process would only publish the same
slices: kube-scheduler's allocator, the resourceclaim controller and the claim
lifecycle are the real ones; NodePrepareResources is not exercised. This keeps 100
nodes affordable on two cores.

Designs are DeviceClasses over one set of devices, selected by published attributes:

- ``shared``: one class, every tier takes any device.
- ``reserved``: the first N devices (by ``ordinal``, whole nodes first) are kept for a
  tier; other tiers' class excludes them.
- ``pools``: each device carries its node group (``nodeGroup``); a tier's class selects
  the groups that serve it. We chose an attribute-selecting DeviceClass over separate
  driver instances: the allocator sees the same thing (disjoint device sets per class),
  and it is what a real cluster does with a node-group label copied into an attribute.

Nodes carry a NoSchedule taint of the run, so no other test's pod lands on them, and no hostname or
OS label (:func:`dra_harness.kube.builders.simulated_node` says why). On a cluster we did not create
they are annotated for the run's own KWOK (:mod:`dra_harness.providers.simulated_nodes`), which fails
at once any pod that is not the run's, and :mod:`dra_harness.providers.node_guard` first refuses
where a tenant's tolerate-all DaemonSet would land on them anyway.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from dra_harness.kube import builders, rest
from dra_harness.kube.pods import wait_nodes_ready
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.labels import RUN_LABEL, SIMULATED_NODE_LABEL
from dra_harness.labels import KWOK_ANNOTATION
from dra_harness.contention.scenario import Scenario

DRIVER = "contention.dra-harness.io"
NODE_LABEL = SIMULATED_NODE_LABEL
GROUP_LABEL = "dra-harness.io/node-group"
TAINT_KEY = "dra-harness.io/contention"


@dataclass(frozen=True)
class Device:
    node: str
    name: str
    ordinal: int
    group: str


def _attr(name: str) -> str:
    return f"device.attributes['{DRIVER}'].{name}"


class Topology:
    """Nodes and slices for one scenario on one cluster, keyed by a short run tag."""

    def __init__(self, kube: Kube, scenario: Scenario, run_id: str, tag: str | None = None,
                 kwok: tuple[str, str] = (KWOK_ANNOTATION, "fake")) -> None:
        """``kwok``: the annotation that hands the nodes to a KWOK (the embedded cluster's by default)."""
        self.kube, self.scenario, self.run_id, self.kwok = kube, scenario, run_id, kwok
        # Names of nodes and classes; unique per topology, since a deleted node may linger a moment.
        self.tag = tag or f"{run_id[:4]}{uuid.uuid4().hex[:4]}"
        groups = [(g.name, g.nodes) for g in scenario.node_groups] or [("all", scenario.nodes)]
        self.devices: list[Device] = []
        self.node_group: dict[str, str] = {}
        i = 0
        for group, count in groups:
            for _ in range(count):
                node = f"ctn-{self.tag}-{i}"
                self.node_group[node] = group
                for d in range(scenario.devices_per_node):
                    self.devices.append(Device(node, f"gpu-{d}", len(self.devices), group))
                i += 1

    @property
    def nodes(self) -> list[str]:
        return list(self.node_group)

    def toleration(self) -> dict:
        return {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}

    def node_body(self, node: str) -> Obj:
        labels = {RUN_LABEL: self.run_id, NODE_LABEL: self.tag, GROUP_LABEL: self.node_group[node]}
        return builders.simulated_node(node, labels, {"key": TAINT_KEY, "value": self.tag, "effect": "NoSchedule"}, self.kwok)

    def node_bodies(self) -> list[Obj]:
        return [self.node_body(n) for n in self.nodes]

    # -- create / delete --------------------------------------------------------
    def create(self, timeout: float = 120.0) -> None:
        labels = {RUN_LABEL: self.run_id, NODE_LABEL: self.tag}
        for node in self.node_group:
            self.kube.create(rest.NODES, self.node_body(node))
            devices = [d for d in self.devices if d.node == node]
            self.kube.create(rest.RESOURCE_SLICES, {
                "metadata": {"name": f"{node}-{DRIVER}", "labels": labels},
                "spec": {
                    "driver": DRIVER, "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": d.name, "attributes": {
                        "ordinal": {"int": d.ordinal}, "nodeGroup": {"string": d.group},
                        "run": {"string": self.tag}}} for d in devices],
                },
            })
        wait_nodes_ready(self.kube, set(self.nodes), f"{NODE_LABEL}={self.tag}", timeout, "simulated contention nodes")

    def delete(self) -> None:
        sel = f"{NODE_LABEL}={self.tag}"
        for res in (rest.RESOURCE_SLICES, rest.NODES, rest.DEVICE_CLASSES, rest.PRIORITY_CLASSES):
            for obj in self.kube.list(res, label_selector=sel):
                self.kube.delete(res, obj["metadata"]["name"])

    # -- designs ----------------------------------------------------------------
    def reserved_ranges(self, design: str) -> dict[str, tuple[int, int]]:
        """Tier -> [lo, hi) ordinals kept for it under ``design`` (empty unless ``reserved``)."""
        if design != "reserved":
            return {}
        out, lo = {}, 0
        for tier, n in self.scenario.designs["reserved"]["devices"].items():
            out[tier] = (lo, lo + n)
            lo += n
        return out

    def selector(self, design: str, tier: str) -> str:
        """The CEL a tier's DeviceClass uses under ``design``."""
        base = f"device.driver == '{DRIVER}' && {_attr('run')} == '{self.tag}'"
        if design == "reserved":
            ranges = self.reserved_ranges(design)
            common = max((hi for _, hi in ranges.values()), default=0)
            own = ranges.get(tier)
            mine = f" || ({_attr('ordinal')} >= {own[0]} && {_attr('ordinal')} < {own[1]})" if own else ""
            return f"{base} && ({_attr('ordinal')} >= {common}{mine})"
        if design == "pools":
            groups = [g.name for g in self.scenario.node_groups if tier in g.tiers]
            return f"{base} && {_attr('nodeGroup')} in [{', '.join(repr(g) for g in groups)}]"
        return base

    def probe_selector(self, tier: str, node: str) -> str:
        """The preemption probe's class: ``tier``'s shared devices on ``node`` only."""
        ordinals = [d.ordinal for d in self.devices if d.node == node]
        return f"{self.selector('shared', tier)} && {_attr('ordinal')} >= {min(ordinals)} && {_attr('ordinal')} <= {max(ordinals)}"

    def allows(self, design: str, tier: str, device: Device) -> bool:
        """What :meth:`selector` means, in Python: checks that the allocator kept to the design."""
        if design == "reserved":
            ranges = self.reserved_ranges(design)
            common = max((hi for _, hi in ranges.values()), default=0)
            lo, hi = ranges.get(tier, (0, 0))
            return device.ordinal >= common or lo <= device.ordinal < hi
        if design == "pools":
            return any(tier in g.tiers and g.name == device.group for g in self.scenario.node_groups)
        return True

    def violations(self, design: str, held: dict[str, tuple[str, list[str]]]) -> list[str]:
        """Jobs (name -> (tier, ["node/device"])) that got a device their tier's class excludes."""
        by_key = {f"{d.node}/{d.name}": d for d in self.devices}
        return [f"{job} ({tier}) got {dev}" for job, (tier, devs) in sorted(held.items()) for dev in devs
                if dev not in by_key or not self.allows(design, tier, by_key[dev])]

    def class_name(self, design: str, tier: str) -> str:
        return f"ctn-{self.tag}-{design}-{tier}"

    def priority_class(self, tier: str) -> str:
        return f"ctn-{self.tag}-{tier}"

    def install(self, design: str, namespace: str) -> None:
        """DeviceClasses, PriorityClasses and one claim template per tier for ``design``."""
        labels = {RUN_LABEL: self.run_id, NODE_LABEL: self.tag}
        existing = {p["metadata"]["name"] for p in self.kube.list(rest.PRIORITY_CLASSES, label_selector=f"{NODE_LABEL}={self.tag}")}
        for t in self.scenario.tiers:
            self.kube.create(rest.DEVICE_CLASSES, {
                "metadata": {"name": self.class_name(design, t.name), "labels": labels},
                "spec": {"selectors": [builders.cel(self.selector(design, t.name))]},
            })
            if self.priority_class(t.name) not in existing:
                self.kube.create(rest.PRIORITY_CLASSES, {
                    "metadata": {"name": self.priority_class(t.name), "labels": labels},
                    "value": t.priority, "preemptionPolicy": "PreemptLowerPriority",
                    "description": f"dra-harness contention tier {t.name}",
                })
            body = builders.claim_template(
                self.template(design, t.name), self.run_id,
                [builders.exactly("gpu", self.class_name(design, t.name), t.devices_per_job)])
            self.kube.create(rest.RESOURCE_CLAIM_TEMPLATES, body, namespace)

    def uninstall(self, design: str) -> None:
        for t in self.scenario.tiers:
            self.kube.delete(rest.DEVICE_CLASSES, self.class_name(design, t.name))

    @staticmethod
    def template(design: str, tier: str) -> str:
        return f"{design}-{tier}"

    def pod(self, design: str, name: str, tier: str, run_s: float | None) -> Obj:
        """A job's pod: the tier's template claim, priority and toleration; completes after ``run_s`` wall seconds."""
        body = builders.pod(
            name, self.run_id, claims={"gpu": {"template": self.template(design, tier)}},
            run_duration=f"{run_s:.3f}s" if run_s is not None else None,
            labels={"dra-harness.io/tier": tier, NODE_LABEL: self.tag},
            priority_class=self.priority_class(tier),
        )
        body["spec"]["tolerations"] = [self.toleration()]
        body["spec"]["restartPolicy"] = "Never"
        return body

