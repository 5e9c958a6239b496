"""Negative control for the device health suite: a fault reported on a device the pod does not hold.

The driver's slice taints the node's *other* GPU NoExecute: the eviction check, watching the pod
that holds the healthy one, must come back empty-handed (no deletion, no DisruptionTarget).
"""

from __future__ import annotations

import uuid

import pytest

from dra_harness.kube import rest
from dra_harness.kube.pods import allocated_devices, pod_claims, wait_evicted, wait_running
from dra_harness.suites.test_device_health import HEALTH_KEY
from dra_harness.topology.fleet import TopologyFleet

pytestmark = pytest.mark.cluster


def test_a_fault_on_a_device_the_pod_does_not_hold_evicts_nothing(small_cluster):
    kube = small_cluster.kube()
    fleet = TopologyFleet(kube, "controls", gpus=2)
    ns = f"health-{uuid.uuid4().hex[:6]}"
    kube.create(rest.NAMESPACES, {"metadata": {"name": ns}})
    fleet.create()
    try:
        kube.create(rest.RESOURCE_CLAIM_TEMPLATES, fleet.claim_template("one", 1, ()), ns)
        kube.create(rest.PODS, fleet.pod("holder", "one"), ns)
        pod = wait_running(kube, ns, "holder", timeout=60)
        held = allocated_devices(pod_claims(kube, pod)["gpu"])[0].device
        other = 1 - int(held.rsplit("-", 1)[1])
        took, cond = wait_evicted(kube, ns, "holder", 10, cause=lambda: fleet.taint(other, "NoExecute", HEALTH_KEY, "xid-79"))
        assert took is None and cond is None, f"evicted after {took} s ({cond}) for a fault on gpu-{other}, not its {held}"
    finally:
        kube.delete(rest.NAMESPACES, ns)
        fleet.delete()
