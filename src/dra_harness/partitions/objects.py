"""A layout made of real API objects: simulated nodes, counter and device slices, classes, tenants.

Per node one pool of the driver ``partition.dra-harness.io``: a slice of shared counters
(one counter set per GPU, one counter per memory slice) and slices of partition devices
that consume them (at most 64 devices a slice, the limit once devices consume counters;
since 1.35 counters and devices live in separate slices of the pool). One DeviceClass per
profile; one namespace per tenant, with a ResourceQuota per profile where the layout sets
one (``<class>.deviceclass.resource.k8s.io/devices``, checked when a claim is created).

``faults`` are the negative controls' injections: ``double-count`` publishes every counter
with twice its value (the slice over-states the hardware), ``no-7g`` leaves a profile's
devices out of the slices (the allocator cannot place what the layout says exists),
``no-quota`` installs no ResourceQuota (tenants can exceed what the layout allows).
"""

from __future__ import annotations

import logging
import uuid

from dra_harness.kube import builders, rest
from dra_harness.kube.pods import wait_nodes_ready
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.kube.waits import WaitError, watch_until
from dra_harness.labels import RUN_LABEL, SIMULATED_NODE_LABEL
from dra_harness.partitions.layout import Layout, Partition
from dra_harness.labels import KWOK_ANNOTATION

log = logging.getLogger(__name__)

DRIVER = "partition.dra-harness.io"
TAG_LABEL = "dra-harness.io/partition"
PROFILE_LABEL = "dra-harness.io/profile"
TAINT_KEY = "dra-harness.io/partition"
FAULTS = ("double-count", "no-7g", "no-quota")
DEVICES_PER_SLICE = 64


class PartitionCluster:
    """The objects of one layout on one cluster, named by a short tag unique to this use."""

    def __init__(self, kube: Kube, layout: Layout, run_id: str, faults: tuple[str, ...] = (),
                 kwok: tuple[str, str] = (KWOK_ANNOTATION, "fake")) -> None:
        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {', '.join(FAULTS)}")
        self.kube, self.layout, self.run_id, self.faults, self.kwok = kube, layout, run_id, faults, kwok
        self.tag = f"{run_id[:4]}{uuid.uuid4().hex[:4]}"
        self.nodes = [f"part-{self.tag}-{n}" for n in range(layout.nodes)]

    @property
    def labels(self) -> dict[str, str]:
        # SIMULATED_NODE_LABEL makes the run's sweep delete these nodes (and only ours) after a crash.
        return {RUN_LABEL: self.run_id, TAG_LABEL: self.tag, SIMULATED_NODE_LABEL: self.tag}

    def namespace(self, tenant: str) -> str:
        return f"part-{self.tag}-{tenant}"

    def class_name(self, profile: str) -> str:
        return f"part-{self.tag}-{profile}"

    def node_index(self, pool: str) -> int | None:
        return self.nodes.index(pool) if pool in self.nodes else None

    def toleration(self) -> Obj:
        return {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}

    # -- create / delete ------------------------------------------------------------------
    def create(self, timeout: float = 120.0) -> None:
        for body in self.slices_and_nodes():
            self.kube.create(rest.NODES if body["kind"] == "Node" else rest.RESOURCE_SLICES, body)
        for profile in self.layout.profiles:
            self.kube.create(rest.DEVICE_CLASSES, {"metadata": {"name": self.class_name(profile), "labels": self.labels},
                                                   "spec": {"selectors": [builders.cel(self.selector(profile))]}})
        for tenant, quota in self.layout.quotas.items():
            ns = self.namespace(tenant)
            self.kube.create(rest.NAMESPACES, {"metadata": {"name": ns, "labels": self.labels}})
            if quota and "no-quota" not in self.faults:
                hard = {f"{self.class_name(p)}.deviceclass.resource.k8s.io/devices": str(n) for p, n in quota.items()}
                self.kube.create(rest.RESOURCE_QUOTAS, {"metadata": {"name": "partitions", "labels": self.labels},
                                                         "spec": {"hard": hard}}, ns)
        wait_nodes_ready(self.kube, set(self.nodes), f"{TAG_LABEL}={self.tag}", timeout, "simulated partition nodes")

    def delete(self, pods_gone_s: float = 60.0) -> None:
        sel = f"{TAG_LABEL}={self.tag}"
        namespaces = [ns["metadata"]["name"] for ns in self.kube.list(rest.NAMESPACES, label_selector=sel)]
        for ns in namespaces:
            self.kube.delete(rest.NAMESPACES, ns)
        # The nodes go only once the pods on them have: a pod whose node is deleted first is an orphan that the
        # pod garbage collector removes only after 40 s of quarantine, its claims holding their devices meanwhile
        # (the next exclusive test waited those 40 s).
        for ns in namespaces:
            try:
                watch_until(self.kube, rest.PODS, lambda pods: not pods, pods_gone_s,  # pending ones too: no refusal to judge
                            f"the pods of namespace {ns} to be deleted", environment=False, namespace=ns)
            except WaitError as e:
                log.warning("deleting the partition nodes with pods left (the pod GC takes them): %s", e)
                break
        for res in (rest.RESOURCE_SLICES, rest.NODES, rest.DEVICE_CLASSES):
            for obj in self.kube.list(res, label_selector=sel):
                self.kube.delete(res, obj["metadata"]["name"])

    # -- bodies ---------------------------------------------------------------------------
    def node_body(self, node: str) -> Obj:
        return builders.simulated_node(node, self.labels, {"key": TAINT_KEY, "value": self.tag, "effect": "NoSchedule"}, self.kwok)

    def node_bodies(self) -> list[Obj]:
        return [self.node_body(n) for n in self.nodes]

    def selector(self, profile: str) -> str:
        attrs = f"device.attributes['{DRIVER}']"
        return f"device.driver == '{DRIVER}' && {attrs}.run == '{self.tag}' && {attrs}.profile == '{profile}'"

    def slices_and_nodes(self) -> list[Obj]:
        """Each node, then its pool: the counter slice and the device slices."""
        out: list[Obj] = []
        value = "2" if "double-count" in self.faults else "1"
        parts = [p for p in self.layout.partitions() if not ("no-7g" in self.faults and p.profile == "7g")]
        for n, node in enumerate(self.nodes):
            out.append({"kind": "Node", **self.node_body(node)})
            mine = [p for p in parts if p.node == n]
            chunks = [mine[i:i + DEVICES_PER_SLICE] for i in range(0, len(mine), DEVICES_PER_SLICE)]
            pool = {"name": node, "generation": 1, "resourceSliceCount": 1 + len(chunks)}
            counters = [{"name": f"gpu{g}", "counters": {f"slice-{s}": {"value": value}
                                                          for s in range(self.layout.memory_slices)}}
                        for g in range(self.layout.gpus_per_node)]
            out.append(self._slice(f"{node}-counters", node, pool, {"sharedCounters": counters}))
            for i, chunk in enumerate(chunks):
                out.append(self._slice(f"{node}-devices-{i}", node, pool, {"devices": [self._device(p) for p in chunk]}))
        return out

    def _slice(self, name: str, node: str, pool: Obj, body: Obj) -> Obj:
        return {"kind": "ResourceSlice", "metadata": {"name": name, "labels": self.labels},
                "spec": {"driver": DRIVER, "nodeName": node, "pool": pool, **body}}

    def _device(self, p: Partition) -> Obj:
        return {
            "name": p.name,
            "attributes": {"profile": {"string": p.profile}, "gpu": {"int": p.gpu}, "start": {"int": p.start},
                           "run": {"string": self.tag}},
            "consumesCounters": [{"counterSet": f"gpu{p.gpu}",
                                  "counters": {f"slice-{s}": {"value": "1"} for s in p.slices}}],
        }

    def claim(self, name: str, profile: str) -> Obj:
        body = builders.claim(name, self.run_id, [builders.exactly("mig", self.class_name(profile))])
        body["metadata"]["labels"].update({TAG_LABEL: self.tag, PROFILE_LABEL: profile})
        return body

    def pod(self, name: str, profile: str) -> Obj:
        body = builders.pod(name, self.run_id, claims={"mig": {"claim": name}},
                            labels={TAG_LABEL: self.tag, PROFILE_LABEL: profile})
        body["spec"]["tolerations"] = [self.toleration()]
        body["spec"]["nodeSelector"] = {TAG_LABEL: self.tag}
        return body

