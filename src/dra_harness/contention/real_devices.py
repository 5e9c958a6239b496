"""A scenario on a cluster's real devices: nodes the user labelled for it, the driver's own slices.

On a cluster the harness did not create, simulated nodes show what the control plane does at
scale, but not what the user's driver and nodes do. Here jobs are pods with a small sleeping
container on the nodes labelled ``dra-harness.io/contention-allowed=true`` (and only those, by
node selector), taking devices the driver already publishes. The designs are DeviceClasses over
the driver's real attributes and the nodes' labels, as the scenario's ``real_devices`` names them:

- ``shared``: every device of the driver.
- ``reserved``: the first N devices (by node, then name) kept for a tier, listed by an attribute
  unique per device (``identity``, ``uuid`` for the example and NVIDIA drivers).
- ``pools``: nodes grouped by the value of a node label (``node_group_label``); a tier's pods get
  node affinity to the groups that serve it, since a DeviceClass cannot see node labels.

Nothing of the cluster is changed: no node, slice or label is written; classes, priority classes
and pods carry the run's labels and are deleted after each design (the run sweep catches the rest).
The cluster's shape replaces the scenario's (``nodes``, ``devices_per_node``, group sizes); the
time compression is lowered so the shortest tolerable wait is at least
:data:`dra_harness.contention.floor.MARGIN` floors (:meth:`RealDevices.adapt_compression`): containers start in seconds, not milliseconds.
"""

from __future__ import annotations

import dataclasses
import json
import uuid

from dra_harness.contention import floor
from dra_harness.contention.scenario import NodeGroup, Scenario, ScenarioError
from dra_harness.contention.topology import NODE_LABEL, Device, Topology
from dra_harness.kube import builders, rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.labels import CONTENTION_ALLOWED_LABEL


class RealDevices(Topology):
    """The labelled nodes' devices of one driver, for one scenario; creates nothing on the nodes."""

    def __init__(self, kube: Kube, scenario: Scenario, run_id: str, image: str, driver: str,
                 identity: str = "uuid", tag: str | None = None) -> None:
        """``driver`` and ``identity``: the run's driver profile's, unless the scenario's ``real_devices`` names others."""
        real = scenario.real_devices
        self.kube, self.run_id, self.image = kube, run_id, image
        self.kwok = ("", "")
        self.tag = tag or f"{run_id[:4]}{uuid.uuid4().hex[:4]}"
        self.driver: str = real.get("driver", driver)
        self.identity: str = real.get("identity", identity)
        self.group_label: str | None = real.get("node_group_label")
        self.devices: list[Device] = []
        self.node_group: dict[str, str] = {}
        self.ids: dict[str, str] = {}  # "node/device" -> identity value
        #: Designs this cluster cannot express, and why (the suite skips them with the reason).
        self.unsupported: dict[str, str] = {}
        if "pools" in scenario.designs and not self.group_label:
            self.unsupported["pools"] = ("pools on a cluster's own devices group nodes by a label: "
                                         "name it in the scenario's real_devices.node_group_label")
        self.scenario = self._discover(scenario)

    # -- what the cluster offers ---------------------------------------------------
    def _discover(self, sc: Scenario) -> Scenario:
        where, here = f"scenario file {sc.path}: real_devices", "contention on the cluster's own devices"
        nodes = {n["metadata"]["name"]: n for n in self.kube.list(rest.NODES, label_selector=f"{CONTENTION_ALLOWED_LABEL}=true")}
        if not nodes:
            raise ScenarioError(f"{here}: no node is labelled {CONTENTION_ALLOWED_LABEL}=true (label the nodes contention may use)")
        per_node: dict[str, list[Obj]] = {n: [] for n in nodes}
        for s in self.kube.list(rest.RESOURCE_SLICES):
            spec = s.get("spec", {})
            if spec.get("driver") == self.driver and spec.get("nodeName") in per_node:
                per_node[spec["nodeName"]].extend(spec.get("devices") or [])
        counts = {n: len(d) for n, d in per_node.items()}
        if not any(counts.values()):
            raise ScenarioError(f"{here}: driver {self.driver} publishes no device on the labelled nodes {', '.join(sorted(nodes))}")
        if len(set(counts.values())) > 1:
            raise ScenarioError(f"{here}: the labelled nodes publish different numbers of {self.driver} devices "
                                f"({json.dumps(counts, sort_keys=True)}); label nodes of one shape")
        for node in sorted(per_node):
            labels = nodes[node]["metadata"].get("labels") or {}
            group = labels.get(self.group_label, "") if self.group_label else "all"
            self.node_group[node] = group
            for dev in sorted(per_node[node], key=lambda d: d["name"]):
                key = f"{node}/{dev['name']}"
                attrs = dev.get("attributes") or {}
                attr = attrs.get(self.identity) or attrs.get(f"{self.driver}/{self.identity}") or {}
                value = next(iter(attr.values()), None) if isinstance(attr, dict) else None
                if value is None and "reserved" in sc.designs:
                    raise ScenarioError(f"{where}.identity: device {key} has no attribute {self.identity!r}")
                self.ids[key] = str(value)
                self.devices.append(Device(node, dev["name"], len(self.devices), group))
        groups = sc.node_groups
        if sc.node_groups and self.group_label:
            found = {g: sum(1 for v in self.node_group.values() if v == g.name) for g in sc.node_groups}
            groups = tuple(NodeGroup(g.name, n, g.tiers) for g, n in found.items())
            empty = [g.name for g, n in found.items() if not n]
            if empty and "pools" in sc.designs:
                raise ScenarioError(f"{where}.node_group_label: no labelled node has {self.group_label}={', '.join(empty)}")
        per = next(iter(counts.values()))
        for t in sc.tiers:
            if t.devices_per_job > per:
                raise ScenarioError(f"{where}: tier {t.name} takes {t.devices_per_job} devices; the labelled nodes have {per} each")
        reserved = sum((sc.designs.get("reserved") or {}).get("devices", {}).values())
        if reserved >= len(self.devices):
            raise ScenarioError(f"{where}: the reserved design keeps {reserved} of the {len(self.devices)} labelled devices")
        return dataclasses.replace(sc, nodes=len(nodes), devices_per_node=per, node_groups=groups)

    def adapt_compression(self, floor_walls: list[float]) -> float:
        """Lower the time compression until the shortest tolerable wait is :data:`~floor.MARGIN` floors (p95); returns it."""
        chosen = floor.compression(floor_walls, self.scenario, most=self.scenario.time_compression)
        self.scenario = dataclasses.replace(self.scenario, time_compression=chosen)
        return chosen

    # -- create / delete: nothing on the nodes -------------------------------------
    def create(self, timeout: float = 120.0) -> None:
        """Nothing to create: the nodes and slices are the cluster's."""

    def delete(self) -> None:
        sel = f"{NODE_LABEL}={self.tag}"
        for res in (rest.DEVICE_CLASSES, rest.PRIORITY_CLASSES):
            for obj in self.kube.list(res, label_selector=sel):
                self.kube.delete(res, obj["metadata"]["name"])

    # -- designs -------------------------------------------------------------------
    def _ids_in(self, lo: int, hi: int) -> list[str]:
        return [self.ids[f"{d.node}/{d.name}"] for d in self.devices if lo <= d.ordinal < hi]

    def selector(self, design: str, tier: str) -> str:
        base = f"device.driver == '{self.driver}'"
        if design != "reserved":
            return base  # pools: by node affinity (:meth:`pod`)
        attr = f"device.attributes['{self.driver}'].{self.identity}"
        ranges = self.reserved_ranges(design)
        kept = [v for lo, hi in ranges.values() for v in self._ids_in(lo, hi)]
        own = ranges.get(tier)
        mine = self._ids_in(*own) if own else []
        clause = f"!({attr} in {_cel_list(kept)})"
        return f"{base} && ({clause}{f' || {attr} in {_cel_list(mine)}' if mine else ''})"

    def probe_selector(self, tier: str, node: str) -> str:
        attr = f"device.attributes['{self.driver}'].{self.identity}"
        return f"device.driver == '{self.driver}' && {attr} in {_cel_list([self.ids[f'{d.node}/{d.name}'] for d in self.devices if d.node == node])}"

    def pod(self, design: str, name: str, tier: str, run_s: float | None) -> Obj:
        """A job's pod: a container sleeping ``run_s`` seconds (an hour when None) on a labelled node."""
        body = builders.pod(name, self.run_id, claims={"gpu": {"template": self.template(design, tier)}},
                            labels={"dra-harness.io/tier": tier, NODE_LABEL: self.tag},
                            priority_class=self.priority_class(tier), image=self.image)
        spec = body["spec"]
        spec["restartPolicy"] = "Never"
        spec["containers"][0]["command"] = ["sleep", f"{run_s if run_s is not None else 3600:.3f}"]
        spec["nodeSelector"] = {CONTENTION_ALLOWED_LABEL: "true"}
        if design == "pools" and self.group_label:
            groups = [g.name for g in self.scenario.node_groups if tier in g.tiers]
            spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": self.group_label, "operator": "In", "values": groups}]}]}}}
        return body


def _cel_list(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"
