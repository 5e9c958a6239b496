"""Driver restart: the node's devices come back, and nothing that ran is disturbed.

From the guidance: test behaviour during driver restart. After a graceful stop or a
SIGKILL the driver must republish the same devices with the same attributes; running
pods and their allocations must not change; new claims must allocate afterwards; and
claims made while the driver is away are either allocated once it is back or wait
with a reason. Slice events are watched throughout, so the report says whether and
for how long the node's slices were missing, or published while no driver ran (stale).
"""

from __future__ import annotations

import time

import pytest

from dra_harness.checks import needs
from dra_harness.checks.incontainer import devices_seen, probe_pod, read_env
from dra_harness.kube import rest
from dra_harness.kube.pods import (
    allocated_devices,
    allocated_node,
    condition,
    pod_claims,
    scheduling_message,
    wait_running,
)
from dra_harness.kube.waits import wait_for_object, watch_until

pytestmark = [pytest.mark.concern("driver-restart", "Driver restart"), pytest.mark.disruptive, pytest.mark.requires(needs.restartable_driver, needs.disruptable_node)]

RETURN_DEADLINE_S = 60.0
#: The kubelet wipes a node's slices this long after its driver unregisters (upstream: 30 s).
WIPE_EXPECTED_S = 30.0
NO_KUBELET = "simulated (KWOK) nodes have no kubelet: nobody wipes the slices of a stopped driver there"


def _needs_driver_held_down(cluster) -> None:
    """Checks of what happens while the driver is *gone* need a driver the harness controls."""
    if not cluster.controls_driver:
        namespace, name = cluster.profile.driver_daemonset
        pytest.skip(f"the driver runs as DaemonSet {namespace}/{name}, which replaces a stopped pod within "
                    "seconds: the harness cannot hold it down (the restart tests measure the replacement instead)")


def _devices(cluster, node: str) -> dict[str, dict]:
    """Device name -> attributes, as the node's slices publish them now."""
    return {k[2]: v["device"].get("attributes") for k, v in cluster.published().items() if v["node"] == node}


def _record(evidence, record) -> None:
    evidence.record(node=record.node, kill=record.kill, down_for_s=record.down_for, back_after_s=record.back_after,
                    replacement_ready_after_s=record.replacement_ready_after,
                    slices_missing_s=record.missing_for, slices_stale_s=record.stale_for,
                    slice_events=record.slice_events, slice_watch_relists=record.relists, failure=record.failure)


@pytest.mark.parametrize("kill", [False, True], ids=["graceful", "sigkill"])
def test_a_restarted_driver_republishes_the_same_devices(cluster, namespace, disruptor, evidence, kill):
    node = disruptor.target_node()
    before = _devices(cluster, node)
    with disruptor.restoring(node):
        record = disruptor.restart_driver(node, kill=kill, down_for=2.0, deadline=RETURN_DEADLINE_S)
    _record(evidence, record)
    assert not record.failure, record.failure
    after = _devices(cluster, node)
    assert after == before, f"{node} publishes different devices after the restart: {sorted(set(before) ^ set(after))}"


def test_running_pods_and_their_allocations_survive_a_driver_restart(cluster, namespace, disruptor, evidence):
    node = disruptor.target_node()
    cluster.template(namespace, "gpu")
    cluster.pod(namespace, "steady", template="gpu", node_name=node)
    pod = wait_running(cluster.kube, namespace, "steady")
    claim = pod_claims(cluster.kube, pod)["gpu"]
    with disruptor.restoring(node):
        record = disruptor.restart_driver(node, kill=True, down_for=2.0, deadline=RETURN_DEADLINE_S)
    _record(evidence, record)
    assert not record.failure, record.failure
    pod_after = cluster.kube.get(rest.PODS, "steady", namespace)
    claim_after = cluster.kube.get(rest.RESOURCE_CLAIMS, claim["metadata"]["name"], namespace)
    assert pod_after["metadata"]["uid"] == pod["metadata"]["uid"] and pod_after["status"]["phase"] == "Running"
    assert allocated_devices(claim_after) == allocated_devices(claim), "the allocation changed across the restart"


def test_new_claims_allocate_after_a_restart(cluster, namespace, disruptor, evidence):
    node = disruptor.target_node()
    with disruptor.restoring(node):
        record = disruptor.restart_driver(node, kill=True, down_for=1.0, deadline=RETURN_DEADLINE_S)
    assert not record.failure, record.failure
    cluster.template(namespace, "gpu")
    cluster.pod(namespace, "after", template="gpu", node_name=node)
    claim = pod_claims(cluster.kube, wait_running(cluster.kube, namespace, "after"))["gpu"]
    devices = allocated_devices(claim)
    assert devices and all(cluster.published()[d.key]["node"] == node for d in devices)
    _record(evidence, record)


def _scheduler_decided(pod: dict) -> bool:
    """The scheduler has bound the pod, or marked it Unschedulable."""
    cond = condition(pod, "PodScheduled") or {}
    return cond.get("status") == "True" or cond.get("reason") == "Unschedulable"


@pytest.mark.parametrize("slices", ["kept", "wiped"])
def test_a_claim_made_while_the_driver_is_down_is_allocated_or_waits_with_a_reason(
        cluster, namespace, disruptor, evidence, slices):
    """What the node publishes when the claim is made decides the one outcome expected:
    its stopped driver's slices still published (``kept``: simulated nodes, and a real
    kubelet's first 30 s) -> the claim is allocated one of those devices on the node; the pod
    runs on a simulated node, and on a real kubelet waits, FailedPrepareDynamicResources,
    until the driver is back. Nothing published (``wiped``, as a kubelet does after 30 s) ->
    PodScheduled False, Unschedulable, "cannot allocate all claims". Either way the pod runs
    on the node once the driver is back."""
    _needs_driver_held_down(cluster)
    node = disruptor.target_node()
    cluster.template(namespace, "gpu")
    kube = cluster.kube
    seen: dict = {}

    def create_while_down() -> None:
        if slices == "wiped":
            for s in kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={cluster.driver},spec.nodeName={node}"):
                kube.delete(rest.RESOURCE_SLICES, s["metadata"]["name"])
        seen["published"] = sorted(_devices(cluster, node))
        cluster.pod(namespace, "during", template="gpu", node_name=node)
        seen["pod"] = wait_for_object(kube, rest.PODS, "during", _scheduler_decided, 30,
                                      f"the scheduler to bind pod {namespace}/during or mark it Unschedulable", namespace)
        if seen["published"] and seen["pod"]["spec"].get("nodeName") and node in cluster.container_nodes():
            def unprepared(items: list[dict]) -> list[dict]:
                return [e for e in items if e.get("reason") == "FailedPrepareDynamicResources"]

            seen["event"] = unprepared(watch_until(
                kube, rest.EVENTS, lambda items: bool(unprepared(items)), 30,
                f"the kubelet of {node} to report that it cannot prepare pod {namespace}/during without its driver",
                namespace=namespace, field_selector="involvedObject.kind=Pod,involvedObject.name=during"))[-1]
            seen["pod"] = kube.get(rest.PODS, "during", namespace)
        elif seen["pod"]["spec"].get("nodeName"):
            seen["pod"] = wait_running(kube, namespace, "during", timeout=30)

    with disruptor.restoring(node):
        record = disruptor.restart_driver(node, down_for=6.0, deadline=RETURN_DEADLINE_S, while_down=create_while_down)
    _record(evidence, record)
    assert not record.failure, record.failure
    pod, published = seen["pod"], seen["published"]
    verdict = scheduling_message(pod)
    if published:
        claim = pod_claims(kube, pod)["gpu"]
        devices = [d.device for d in allocated_devices(claim)]
        while_down = f"allocated {', '.join(devices)} from the slices {node} still published"
        assert pod["spec"].get("nodeName") == node and allocated_node(claim) == node and len(devices) == 1 \
            and devices[0] in published, (
            f"with {len(published)} devices of {node} still published, the claim should be allocated one of them "
            f"on {node}; the scheduler says: {verdict}; allocated: {devices}")
        if "event" in seen:
            while_down += f"; the kubelet waits: {seen['event']['reason']}: {seen['event'].get('message', '')}"
            assert pod["status"].get("phase") == "Pending", f"the pod ran without its driver: phase {pod['status'].get('phase')}"
        else:
            assert pod["status"].get("phase") == "Running", f"phase {pod['status'].get('phase')} on simulated node {node}"
    else:
        cond = condition(pod, "PodScheduled") or {}
        while_down = f"pending: {verdict}"
        assert cond.get("status") == "False" and cond.get("reason") == "Unschedulable" \
            and "cannot allocate all claims" in cond.get("message", ""), (
            f"with no device of {node} published, the scheduler should say it cannot allocate the pod's claim; "
            f"PodScheduled says: {verdict}")
    pod = wait_running(kube, namespace, "during", timeout=60)
    evidence.record(while_driver_down=while_down, finally_running_on=pod["spec"]["nodeName"])
    assert pod["spec"]["nodeName"] == node


def test_slices_wiped_while_the_driver_is_down_come_back_with_it(cluster, namespace, disruptor, evidence):
    """What a kubelet does 30 s after its driver goes away, done at once: the restart must republish."""
    _needs_driver_held_down(cluster)  # and the slices are not ours to delete on someone's cluster
    node = disruptor.target_node()
    before = _devices(cluster, node)

    def wipe() -> None:
        for s in cluster.kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={cluster.driver},spec.nodeName={node}"):
            cluster.kube.delete(rest.RESOURCE_SLICES, s["metadata"]["name"])

    with disruptor.restoring(node):
        record = disruptor.restart_driver(node, down_for=2.0, deadline=RETURN_DEADLINE_S, while_down=wipe)
    _record(evidence, record)
    assert not record.failure, record.failure
    assert record.missing_for > 0, f"slices were never seen missing: {record.slice_events}"
    assert _devices(cluster, node) == before


def _container_state(pod: dict) -> list[tuple[str, str, int]]:
    return [(c["name"], c.get("containerID", ""), c.get("restartCount", 0)) for c in pod["status"].get("containerStatuses") or []]


@pytest.mark.requires(needs.pullable_image)
def test_a_kubelet_wipes_the_slices_of_a_driver_gone_30_s_and_running_containers_keep_running(
        cluster, namespace, disruptor, evidence):
    _needs_driver_held_down(cluster)
    node = disruptor.target_node()
    if node not in cluster.container_nodes():
        pytest.skip(f"{NO_KUBELET} ({cluster.simulated_because(node)})")
    cluster.template(namespace, "gpu")
    cluster.kube.create(rest.PODS, probe_pod("steady", cluster.run_id, cluster.probe_image, node, {"gpu": {"template": "gpu"}}), namespace)
    before = wait_running(cluster.kube, namespace, "steady", timeout=120)
    seen = devices_seen(read_env(cluster.kube, namespace, "steady", "ctr0"))
    published = len(_devices(cluster, node))
    claim_before = pod_claims(cluster.kube, before)["gpu"]["status"]["allocation"]

    def node_devices(slices: list[dict]) -> int:
        return sum(len(s["spec"].get("devices") or []) for s in slices if s["spec"].get("nodeName") == node)

    with disruptor.restoring(node):
        disruptor.stop_driver(node)
        stopped = time.monotonic()
        watch_until(cluster.kube, rest.RESOURCE_SLICES, lambda items: node_devices(items) == 0, WIPE_EXPECTED_S + 60,
                    f"the kubelet of {node} to wipe the slices of its stopped driver",
                    field_selector=f"spec.driver={cluster.driver}")
        wiped_after = time.monotonic() - stopped
        during = cluster.kube.get(rest.PODS, "steady", namespace)
    # Later tests need the node whole again: wait until the restarted driver republished it.
    back = watch_until(cluster.kube, rest.RESOURCE_SLICES, lambda items: node_devices(items) == published, RETURN_DEADLINE_S,
                       f"the restarted driver of {node} to republish {published} devices", field_selector=f"spec.driver={cluster.driver}")
    assert node_devices(back) == published
    after = wait_running(cluster.kube, namespace, "steady")
    evidence.record(node=node, slices_wiped_after_s=round(wiped_after, 1), device_seen=sorted(seen))
    assert during["status"]["phase"] == "Running" and _container_state(during) == _container_state(before), \
        f"the container changed while the driver was away: {_container_state(before)} -> {_container_state(during)}"
    assert _container_state(after) == _container_state(before)
    assert pod_claims(cluster.kube, after)["gpu"]["status"]["allocation"] == claim_before
    assert WIPE_EXPECTED_S - 5 <= wiped_after <= WIPE_EXPECTED_S + 30, f"slices wiped after {wiped_after:.1f}s"
