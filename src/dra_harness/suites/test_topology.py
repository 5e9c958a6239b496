"""Topology: shards matched on PCIe root and NVLink domain get devices that really share them.

A tensor-parallel job that constrains its claim with ``matchAttribute`` on
``resource.kubernetes.io/pcieRoot`` (and an NVLink-style domain) must get devices that share
them, or stay Pending with the scheduler's reason and nothing held. On the harness's simulated
node (:mod:`dra_harness.topology.fleet`: 8 GPUs, two roots of 4, two domains of 4 crossing
them) every allocation is judged by the node's layout, not by what its slice says. On the
cluster's own driver the same constraint is checked where its profile names a PCIe-root
attribute and its devices publish one (NVIDIA's driver does; the example driver does not).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dra_harness.kube import rest
from dra_harness.kube.pods import allocated_devices, pod_claims, scheduling_message, wait_running, wait_unschedulable
from dra_harness.plugin.simulated import on_simulated_nodes
from dra_harness.topology import checks
from dra_harness.topology.fleet import NVLINK_DOMAIN, PCIE_ROOT, TopologyFleet, domain_of, gpu_of, root_of

pytestmark = [pytest.mark.concern("topology", "Topology"), pytest.mark.exclusive]  # a simulated node must not meet other suites' node audits
#: What kube-scheduler's DynamicResources plugin says of a node whose devices cannot satisfy a claim.
DRA_REFUSAL = "cannot allocate all claims"


@pytest.fixture
def fleet(request: pytest.FixtureRequest, cluster, run_id: str) -> Iterator[TopologyFleet]:
    fl = TopologyFleet(cluster.kube, run_id)
    with on_simulated_nodes(request.config, cluster, fl, "the topology suite"):
        yield fl


def allocate(kube, fleet: TopologyFleet, namespace: str, name: str, count: int, match: tuple[str, ...]) -> list[str]:
    """Run a pod whose claim asks for ``count`` GPUs matched on ``match``; the devices it got."""
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, fleet.claim_template(name, count, match), namespace)
    kube.create(rest.PODS, fleet.pod(name, name), namespace)
    pod = wait_running(kube, namespace, name, timeout=60)
    return sorted(d.device for d in allocated_devices(pod_claims(kube, pod)["gpu"]))


def refused(kube, fleet: TopologyFleet, namespace: str, name: str, count: int, match: tuple[str, ...]) -> str:
    """A pod whose claim cannot be met stays unschedulable with nothing allocated; the scheduler's message."""
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, fleet.claim_template(name, count, match), namespace)
    kube.create(rest.PODS, fleet.pod(name, name), namespace)
    pod = wait_unschedulable(kube, namespace, name, timeout=60)
    claim = next(iter(pod_claims(kube, pod).values()), None)
    held = [d.device for d in allocated_devices(claim)] if claim else []
    assert not held, f"the pending pod's claim holds {held}"
    return scheduling_message(pod)


def test_a_claim_matched_on_pcie_root_gets_devices_under_one_root(cluster, fleet, namespace, evidence):
    devices = allocate(cluster.kube, fleet, namespace, "tp4", 4, (PCIE_ROOT,))
    evidence.record(node=fleet.node, devices=devices, roots=sorted({root_of(gpu_of(d)) for d in devices}))
    assert len(devices) == 4, devices
    assert not checks.problems(devices, (PCIE_ROOT,)), checks.problems(devices, (PCIE_ROOT,))


def test_more_devices_than_one_root_holds_stay_pending_with_the_reason(cluster, fleet, namespace, evidence):
    message = refused(cluster.kube, fleet, namespace, "tp5", 5, (PCIE_ROOT,))
    evidence.record(node=fleet.node, requested=5, per_root=4, scheduler_message=message)
    assert DRA_REFUSAL in message, f"pending, but not for its devices: {message}"


def test_a_claim_matched_on_root_and_nvlink_domain_gets_devices_sharing_both(cluster, fleet, namespace, evidence):
    pair = allocate(cluster.kube, fleet, namespace, "pair", 2, (PCIE_ROOT, NVLINK_DOMAIN))
    message = refused(cluster.kube, fleet, namespace, "three", 3, (PCIE_ROOT, NVLINK_DOMAIN))
    evidence.record(node=fleet.node, pair=pair, root=root_of(gpu_of(pair[0])), domain=domain_of(gpu_of(pair[0])),
                    three_scheduler_message=message)
    assert DRA_REFUSAL in message, f"the 3-device claim is pending, but not for its devices: {message}"
    assert len(pair) == 2 and not checks.problems(pair, (PCIE_ROOT, NVLINK_DOMAIN)), (pair, checks.problems(pair, (PCIE_ROOT, NVLINK_DOMAIN)))


def test_on_the_drivers_own_devices_a_claim_matched_on_pcie_root_stays_under_one_root(cluster, namespace, evidence):
    logical = "pcieRoot"
    if logical not in cluster.profile.attributes:
        pytest.skip(f"profile {cluster.profile.name} names no PCIe-root attribute (the example driver publishes no topology)")
    attribute = cluster.profile.qualified(cluster.profile.attributes[logical])
    published = cluster.published()
    roots: dict[tuple[str, str], list[str]] = {}
    for key, entry in published.items():
        if (root := cluster.profile.device_attribute(entry["device"], logical)) is not None:
            roots.setdefault((entry["node"], str(root)), []).append(key)
    if not any(len(keys) >= 2 for keys in roots.values()):
        pytest.skip(f"no node publishes two devices under one {attribute} ({len(roots)} node/root pairs seen)")
    cluster.template(namespace, "tp2", cluster.request(count=2), constraints=[{"matchAttribute": attribute}])
    cluster.pod(namespace, "tp2", template="tp2")
    pod = wait_running(cluster.kube, namespace, "tp2", timeout=90)
    devices = allocated_devices(pod_claims(cluster.kube, pod)["gpu"])
    got = {str(cluster.profile.device_attribute(published[d.key]["device"], logical)) for d in devices}
    evidence.record(attribute=attribute, devices=[str(d) for d in devices], roots=sorted(got))
    assert len(devices) == 2 and len(got) == 1, f"{[str(d) for d in devices]} under roots {sorted(got)}"
