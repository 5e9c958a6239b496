"""What the cluster should publish, and an audit of what its ResourceSlices do publish.

A missing or stale ResourceSlice is the most common reason a DRA pod stays Pending,
and it looks exactly like a full cluster. The audit therefore checks slices against
an expected-hardware description (a small YAML file, or what the embedded cluster
started) and reports every discrepancy as a finding with the objects involved.
Pure logic over plain dicts: no API access here.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dra_harness.kube.types import Obj, ResourceSlice
from dra_harness.providers.hardware import Hardware, attribute_value, devices_by_node, newest_generation

@dataclass(frozen=True)
class Finding:
    """One discrepancy; ``kind`` is stable for grouping, ``message`` is for people."""

    kind: str
    message: str
    objects: tuple[str, ...] = ()


def audit(slices: Sequence[ResourceSlice | Obj], hardware: Hardware, node_names: set[str] | None = None) -> list[Finding]:
    """Every way the published slices differ from ``hardware``.

    ``node_names`` are the Node objects that exist; a slice for any other node is stale.
    """
    ours = [s for s in slices if s["spec"]["driver"] == hardware.driver]
    newest = newest_generation(ours)
    findings: list[Finding] = []
    by_node = devices_by_node(ours, hardware.driver)

    for node, want in sorted(hardware.nodes.items()):
        have = len(by_node.get(node, []))
        if node not in by_node and want > 0:
            findings.append(Finding("missing-slice", f"node {node} publishes no ResourceSlice for {hardware.driver} (expected {want} devices)", (node,)))
        elif have != want:
            findings.append(Finding("device-count", f"node {node} publishes {have} devices of {hardware.driver}, expected {want}", (node,)))

    for node in sorted(set(by_node) - set(hardware.nodes)):
        findings.append(Finding("unexpected-node", f"node {node} publishes {len(by_node[node])} devices of {hardware.driver} but is not in the expected hardware", (node,)))
    if node_names is not None:
        for s in ours:
            slice_node = s["spec"].get("nodeName")
            if slice_node and slice_node not in node_names:
                findings.append(Finding("stale-slice", f"ResourceSlice {s['metadata']['name']} is for node {slice_node}, which does not exist", (s["metadata"]["name"],)))

    # Pools: complete, and owned by one node.
    pool_slices: dict[str, list[ResourceSlice | Obj]] = defaultdict(list)
    for s in newest:
        pool_slices[s["spec"]["pool"]["name"]].append(s)
    for pool, members in sorted(pool_slices.items()):
        declared = {int(m["spec"]["pool"].get("resourceSliceCount", 1)) for m in members}
        names = tuple(m["metadata"]["name"] for m in members)
        if declared != {len(members)}:
            findings.append(Finding("incomplete-pool", f"pool {pool} declares {sorted(declared)} slice(s) but {len(members)} are published", names))
        nodes = {m["spec"].get("nodeName") for m in members}
        if len(nodes) > 1:
            findings.append(Finding("duplicate-pool", f"pool {pool} is published for several nodes: {', '.join(sorted(str(n) for n in nodes))}", names))

    # Devices: one name per pool, one uuid per cluster, expected attributes and capacity.
    seen: dict[tuple[str, str], str] = {}
    uuids: dict[Any, str] = {}
    for s in newest:
        pool, sname = s["spec"]["pool"]["name"], s["metadata"]["name"]
        for d in s["spec"].get("devices") or []:
            ident = f"{pool}/{d['name']}"
            key = (pool, d["name"])
            if key in seen:
                findings.append(Finding("duplicate-device", f"device {ident} is published twice (slices {seen[key]} and {sname})", (seen[key], sname)))
            seen[key] = sname
            attrs = {k.split("/")[-1]: attribute_value(v) for k, v in (d.get("attributes") or {}).items()}
            uuid = attrs.get("uuid")
            if uuid is not None:
                if uuid in uuids:
                    findings.append(Finding("duplicate-uuid", f"devices {uuids[uuid]} and {ident} report the same uuid {uuid}", (uuids[uuid], ident)))
                uuids[uuid] = ident
            for name, want in hardware.attributes.items():
                if attrs.get(name) != want:
                    findings.append(Finding("attribute", f"device {ident}: attribute {name} is {attrs.get(name)!r}, expected {want!r}", (ident,)))
            capacity = {k.split("/")[-1]: v.get("value") for k, v in (d.get("capacity") or {}).items()}
            for name, want_capacity in hardware.capacity.items():
                if capacity.get(name) != want_capacity:
                    findings.append(Finding("capacity", f"device {ident}: capacity {name} is {capacity.get(name)!r}, expected {want_capacity!r}", (ident,)))
    return findings
