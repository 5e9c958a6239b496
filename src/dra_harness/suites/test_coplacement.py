"""Tensor-parallel co-placement: all shards in one claim, on one node.

The guidance for tensor parallelism: ask for all N devices in one claim, so that the
allocation is all-or-nothing on one node, and constrain them to match (same model,
same driver version; same PCIe root on NVIDIA). Writing one claim per shard instead
lets the scheduler hand out devices one by one, so two jobs can each hold part of a
node while neither has what it needs; the last test shows that with numbers.
"""

from __future__ import annotations

import pytest

from dra_harness.checks import needs
from dra_harness.kube import rest
from dra_harness.kube.pods import (
    allocated_devices,
    allocated_node,
    placement,
    pod_claims,
    scheduling_message,
    wait_running,
    wait_unschedulable,
)
from dra_harness.kube.waits import watch_until

pytestmark = pytest.mark.concern("coplacement", "Co-placement")


def _node_size(cluster) -> int:
    return min(cluster.expected.nodes.values())


def _sizes(cluster) -> list[int]:
    return [n for n in (2, 4, 8) if n <= _node_size(cluster)]


# A whole 8-device node is only free when no other test holds a device on it.
@pytest.mark.parametrize("shards", [2, 4, pytest.param(8, marks=pytest.mark.exclusive)])
def test_one_claim_for_all_shards_is_allocated_on_one_node(cluster, preflight, namespace, shards, evidence):
    if shards not in _sizes(cluster):
        pytest.skip(f"nodes have {_node_size(cluster)} devices, fewer than {shards}")
    needs.demand(preflight, needs.free_devices(shards, same_node=True))
    constraints = [{"matchAttribute": cluster.profile.qualified(a)} for a in cluster.profile.coplacement_attributes]
    cluster.template(namespace, "tp", cluster.request(count=shards), constraints=constraints)
    cluster.pod(namespace, "tp-job", template="tp")
    pod = wait_running(cluster.kube, namespace, "tp-job", timeout=90)
    claim = pod_claims(cluster.kube, pod)["gpu"]
    devices = allocated_devices(claim)
    published = cluster.published()
    nodes = {published[d.key]["node"] for d in devices}
    assert len({d.key for d in devices}) == shards, f"{len(devices)} devices for {shards} shards"
    assert nodes == {pod["spec"]["nodeName"]} == {allocated_node(claim)}, f"shards spread over {nodes}"
    for attr in cluster.profile.coplacement_attributes:
        values = {cluster.profile.device_attribute(published[d.key]["device"], attr) for d in devices}
        assert len(values) == 1, f"matchAttribute {attr} not honoured: {values}"
    evidence.record(shards=shards, node=pod["spec"]["nodeName"], devices=[str(d) for d in devices])


def test_a_match_attribute_no_two_devices_share_is_never_satisfied(cluster, namespace, evidence):
    """Proof that constraints are evaluated: every device of a node has its own index."""
    index = cluster.profile.qualified(cluster.profile.attributes["index"]) if "index" in cluster.profile.attributes else None
    if index is None:
        pytest.skip(f"profile {cluster.profile.name} has no per-device index attribute")
    cluster.template(namespace, "impossible", cluster.request(count=2), constraints=[{"matchAttribute": index}])
    cluster.pod(namespace, "never", template="impossible")
    pod = wait_unschedulable(cluster.kube, namespace, "never", timeout=60)
    claim = next(iter(pod_claims(cluster.kube, pod).values()), None)
    assert claim is None or not allocated_devices(claim)
    evidence.record(constraint=index, scheduler_message=scheduling_message(pod))


@pytest.mark.requires(needs.namespace_devices(lambda f: needs.largest_node(f) + 1, "a node's devices + 1"))
def test_a_request_larger_than_any_node_stays_pending_with_nothing_allocated(cluster, namespace, evidence):
    too_many = _node_size(cluster) + 1
    cluster.template(namespace, "too-big", cluster.request(count=too_many))
    cluster.pod(namespace, "too-big", template="too-big")
    pod = wait_unschedulable(cluster.kube, namespace, "too-big", timeout=60)
    claim = pod_claims(cluster.kube, pod)["gpu"]
    assert not allocated_devices(claim), f"partial allocation: {[str(d) for d in allocated_devices(claim)]}"
    ours = [k for k, holders in cluster.allocations().items() if any(h.startswith(namespace + "/") for h in holders)]
    assert not ours, f"devices held by the pending job: {ours}"
    evidence.record(requested=too_many, scheduler_message=scheduling_message(pod))


@pytest.mark.exclusive
@pytest.mark.requires(needs.whole_node(), needs.namespace_devices(lambda f: 2 * needs.largest_node(f), "two nodes' devices"))
def test_per_shard_claims_can_deadlock_two_jobs_where_one_claim_per_job_cannot(cluster, preflight, namespace, evidence):
    """Two jobs that each need a whole node, on one node: shards interleave; whole claims do not.

    The node is one the preflight saw wholly free and schedulable: on a shared cluster another
    tenant's device, or a cordon, would let both jobs run and say nothing about the pattern."""
    kube = cluster.kube
    node = preflight.whole_free_nodes()[0]
    size = preflight.nodes[node].published
    cluster.template(namespace, "shard", cluster.request())
    cluster.template(namespace, "whole", cluster.request(count=size))

    # Anti-pattern: one claim per shard, shards of the two jobs arriving interleaved.
    for i in range(size):
        for job in ("a", "b"):
            cluster.pod(namespace, f"shard-{job}-{i}", template="shard", node_name=node, labels={"job": f"shard-{job}"})

    def settled(pods):  # every shard either runs or has been found unschedulable
        return len(pods) == 2 * size and all(placement(p) != "pending" for p in pods)

    shards = watch_until(kube, rest.PODS, settled, 90, "every shard to run or be found unschedulable",
                         namespace=namespace, label_selector="job in (shard-a,shard-b)")
    held_by_shards = {job: sum(1 for p in shards if p["metadata"]["labels"]["job"] == f"shard-{job}"
                               and p["status"].get("phase") == "Running") for job in ("a", "b")}
    complete_shard_jobs = sum(1 for n in held_by_shards.values() if n == size)
    for pod in shards:
        kube.delete(rest.PODS, pod["metadata"]["name"], namespace)
    watch_until(kube, rest.RESOURCE_CLAIMS, lambda items: not items, 60, "shard claims to be released", namespace=namespace)

    # The same jobs as one claim each: all or nothing.
    for job in ("a", "b"):
        cluster.pod(namespace, f"whole-{job}", template="whole", node_name=node, labels={"job": "whole"})
    # Either job may win the node; the point is that exactly one does and the other holds nothing.
    def one_won(pods):
        return len(pods) == 2 and sorted(placement(p) for p in pods) == ["running", "unschedulable"]

    wholes = watch_until(kube, rest.PODS, one_won, 60, "one whole-node job to run and the other to wait",
                         namespace=namespace, label_selector="job=whole")
    waiting = next(p for p in wholes if placement(p) == "unschedulable")
    held_by_waiting = [str(d) for c in pod_claims(kube, waiting).values() for d in allocated_devices(c)]

    evidence.record(
        node=node, devices_per_job=size,
        per_shard={"shards_running": held_by_shards, "jobs_with_all_shards": complete_shard_jobs},
        one_claim_per_job={"jobs_running": 1, "devices_held_by_waiting_job": len(held_by_waiting)},
    )
    assert sum(held_by_shards.values()) == size, f"the node's {size} devices were not all handed out: {held_by_shards}"
    assert complete_shard_jobs == 0, f"expected interleaved shards to leave no job whole, got {held_by_shards}"
    assert not held_by_waiting, f"the waiting whole-node job holds {held_by_waiting}"
