"""Negative control for the topology suite: a slice that reports every GPU under one PCIe root.

The scheduler honours the constraint against what the slice says, so a 5-GPU claim matched on
the root is allocated; the check, which reads the node's layout instead, must catch the claim
spanning both real roots.
"""

from __future__ import annotations

import uuid

import pytest

from dra_harness.kube import rest
from dra_harness.kube.pods import allocated_devices, pod_claims, wait_running
from dra_harness.topology import checks
from dra_harness.topology.fleet import PCIE_ROOT, TopologyFleet

pytestmark = pytest.mark.cluster


def test_a_slice_that_flattens_pcie_roots_is_caught_spanning_two_roots(small_cluster):
    kube = small_cluster.kube()
    fleet = TopologyFleet(kube, "controls", faults=("flat-root",))
    ns = f"topo-{uuid.uuid4().hex[:6]}"
    kube.create(rest.NAMESPACES, {"metadata": {"name": ns}})
    fleet.create()
    try:
        kube.create(rest.RESOURCE_CLAIM_TEMPLATES, fleet.claim_template("tp5", 5, (PCIE_ROOT,)), ns)
        kube.create(rest.PODS, fleet.pod("tp5", "tp5"), ns)
        pod = wait_running(kube, ns, "tp5", timeout=60)
        devices = sorted(d.device for d in allocated_devices(pod_claims(kube, pod)["gpu"]))
        found = checks.problems(devices, (PCIE_ROOT,))
        assert len(devices) == 5
        assert len(found) == 1 and "span 2 PCIe roots" in found[0] and "pci0000:00" in found[0] and "pci0000:80" in found[0], found
    finally:
        kube.delete(rest.NAMESPACES, ns)
        fleet.delete()
