"""Node drain: devices are freed, replacements get new devices elsewhere, the node is restored.

From the guidance ("Good practices for DRA as a cluster admin"): drain with the
Eviction API so PodDisruptionBudgets apply, stop the driver last, check that no
allocated claim remains on the node, uncordon at the end. A claim shared by several
pods is pinned to its node: replacements cannot use it elsewhere until its last
consumer is gone, and the suite records what they see meanwhile.
"""

from __future__ import annotations

import time

import pytest

from dra_harness.checks import needs
from dra_harness.errors import NotEstablished
from dra_harness.checks.incontainer import probe_pod
from dra_harness.kube import builders as b
from dra_harness.kube import policy, rest
from dra_harness.kube.pods import (
    allocated_devices,
    allocated_node,
    condition,
    pod_claims,
    wait_running,
)
from dra_harness.kube.waits import WaitTimeout, wait_for_deletion, watch_until

pytestmark = [pytest.mark.concern("node-drain", "Node drain"), pytest.mark.disruptive,
              pytest.mark.requires(needs.disruptable_node, needs.right("patch-nodes"), needs.right("evict-pods"))]

FREE_DEADLINE_S = 60.0
#: How long a pod is watched in Terminating while its node's driver is stopped.
STUCK_WATCH_S = 15.0


def _deployment(cluster, namespace: str, name: str, replicas: int, node: str, claims: dict) -> None:
    """Replicas that prefer ``node`` (so they start there) but may run anywhere."""
    template = b.pod(name, cluster.run_id, claims=claims, labels={"app": name})
    template["spec"]["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}}]}}
    cluster.kube.create(rest.DEPLOYMENTS, {
        "metadata": b.meta(name, cluster.run_id),
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": template["metadata"]["labels"]}, "spec": template["spec"]}},
    }, namespace)


def _running(pods: list[dict]) -> list[dict]:
    return [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def _started_on(node: str, what: str, nodes: set) -> None:
    """The scenario's start: ``what`` on the node to drain. Its affinity is a preference (a hard one would keep the
    replacements off every other node), so the scheduler may place it elsewhere, say on a cluster whose nodes are
    recovering from a control-plane restart: then there is nothing to drain, and no verdict."""
    if nodes != {node}:
        raise NotEstablished(f"{what} started on {', '.join(sorted(map(str, nodes)))}, not on {node}, the node to drain "
                             "(the scheduler did not follow the preferred node affinity)")


def _replicas_running(kube, namespace: str, app: str, count: int) -> list:
    """The Deployment's ``count`` pods Running; not established where the cluster's policy refuses to create them."""
    try:
        return watch_until(kube, rest.PODS, lambda ps: len(_running(ps)) == count, 60, f"{count} {app} Running",
                           namespace=namespace, label_selector=f"app={app}")
    except WaitTimeout as e:
        if why := policy.replica_refusal(kube, namespace):
            raise NotEstablished(why) from e
        raise


def _held_on(cluster, node: str, namespace: str) -> list[str]:
    """Claims of this test holding devices of ``node`` (another team's claims there are not the drain's to free)."""
    on_node = {k for k, v in cluster.published().items() if v["node"] == node}
    return sorted(c for k, claims in cluster.allocations().items() if k in on_node for c in claims
                  if c.startswith(f"{namespace}/"))


@pytest.mark.requires(needs.restartable_driver)  # the driver goes last, as in a real drain
def test_draining_a_node_frees_its_devices_and_replacements_get_new_ones_elsewhere(cluster, preflight, namespace, disruptor,
                                                                                    evidence):
    kube = cluster.kube
    node = disruptor.target_node()
    # Three workers start on the node and must find three devices elsewhere once it is drained.
    needs.demand(preflight, needs.free_devices(3, on=node), needs.free_devices(3, besides=node))
    cluster.template(namespace, "gpu")
    _deployment(cluster, namespace, "workers", 3, node, {"gpu": {"template": "gpu"}})
    first = _replicas_running(kube, namespace, "workers", 3)
    _started_on(node, "the workers", {p["spec"]["nodeName"] for p in first})
    old_claims = {pod_claims(kube, p)["gpu"]["metadata"]["name"] for p in first}

    with disruptor.restoring(node):
        started = time.monotonic()
        result = disruptor.drain(node, timeout=FREE_DEADLINE_S)
        assert result.complete, f"drain blocked: {result.blocked}"
        watch_until(kube, rest.RESOURCE_CLAIMS, lambda cs: not {c["metadata"]["name"] for c in cs} & old_claims,
                    FREE_DEADLINE_S, "the evicted pods' generated claims to be deleted", namespace=namespace)
        deadline = time.monotonic() + FREE_DEADLINE_S
        while _held_on(cluster, node, namespace) and time.monotonic() < deadline:
            time.sleep(0.1)
        free_after = time.monotonic() - started
        assert not _held_on(cluster, node, namespace), f"devices of {node} still held: {_held_on(cluster, node, namespace)}"
        # Evicted workers may still be listed, terminating (their 1-s grace): the replacements are the running ones.
        replacements = _running(watch_until(kube, rest.PODS, lambda ps: len(_running(ps)) == 3, 60,
                                            "3 replacement workers Running", namespace=namespace, label_selector="app=workers"))
        # The driver goes last, once nothing on the node holds a device.
        disruptor.stop_driver(node)
        assert not _held_on(cluster, node, namespace)
    placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in replacements}
    assert node not in placed.values(), f"replacements ran on the drained node: {placed}"
    for p in replacements:
        claim = pod_claims(kube, p)["gpu"]
        assert claim["metadata"]["name"] not in old_claims and allocated_node(claim) == p["spec"]["nodeName"]
    assert not kube.get(rest.NODES, node)["spec"].get("unschedulable"), "the node was left cordoned"
    assert cluster.driver_running(node), "the driver was not restarted"
    evidence.record(node=node, evicted=result.evicted, devices_free_after_s=round(free_after, 3), replacements=placed)


def test_replacements_of_a_shared_claims_consumers_wait_until_its_last_consumer_is_gone(cluster, preflight, namespace,
                                                                                         disruptor, evidence):
    kube = cluster.kube
    node = disruptor.target_node()
    needs.demand(preflight, needs.free_devices(1, on=node), needs.free_devices(1, besides=node))
    cluster.claim(namespace, "shared")
    _deployment(cluster, namespace, "readers", 2, node, {"gpu": {"claim": "shared"}})
    _replicas_running(kube, namespace, "readers", 2)
    _started_on(node, "the readers' claim", {allocated_node(kube.get(rest.RESOURCE_CLAIMS, "shared", namespace))})

    seen: list[str] = []

    def note_messages(pods):
        for p in pods:
            cond = condition(p, "PodScheduled") or {}
            if cond.get("status") == "False" and cond.get("message") and cond["message"] not in seen:
                seen.append(cond["message"])
        return False

    with disruptor.restoring(node):
        started = time.monotonic()
        result = disruptor.drain(node, timeout=FREE_DEADLINE_S)
        assert result.complete, f"drain blocked: {result.blocked}"
        running = watch_until(
            kube, rest.PODS,
            lambda ps: note_messages(ps) or (len(_running(ps)) == 2 and all(p["spec"]["nodeName"] != node for p in _running(ps))),
            FREE_DEADLINE_S, "replacement readers Running on another node", namespace=namespace, label_selector="app=readers")
        moved_after = time.monotonic() - started
    claim = kube.get(rest.RESOURCE_CLAIMS, "shared", namespace)
    new_node = allocated_node(claim)
    assert new_node != node and {p["spec"]["nodeName"] for p in _running(running)} == {new_node}
    assert len(allocated_devices(claim)) == 1
    evidence.record(node=node, reallocated_to=new_node, replacements_running_after_s=round(moved_after, 3),
                    replacement_scheduler_messages=seen)


def _cdi_specs_naming(cluster, node: str, uid: str) -> list[str]:
    """CDI spec files on an embedded real node that mention ``uid`` (the driver's prepared claim)."""
    cdi = cluster.cdi_dir(node)
    if cdi is None:
        return []
    return sorted(p.name for p in cdi.glob("*") if p.is_file() and uid in p.read_text(errors="replace"))


@pytest.mark.requires(needs.restartable_driver, needs.pullable_image)
def test_a_pod_whose_driver_is_gone_stays_terminating_until_the_driver_unprepares_it(cluster, namespace, disruptor, evidence):
    """A real kubelet cannot unprepare a claim without its driver, so it keeps the pod: a finding for drains
    that stop the driver before the node is empty."""
    if not cluster.controls_driver:
        namespace, name = cluster.profile.driver_daemonset
        pytest.skip(f"the driver runs as DaemonSet {namespace}/{name}, which replaces a stopped pod within seconds: "
                    "the harness cannot keep it away while the pod terminates")
    node = disruptor.target_node()
    if node not in cluster.container_nodes():
        pytest.skip(f"simulated (KWOK) nodes delete pods without preparing or unpreparing anything ({cluster.simulated_because(node)})")
    cluster.template(namespace, "gpu")
    body = probe_pod("stuck", cluster.run_id, cluster.probe_image, node, {"gpu": {"template": "gpu"}})
    body["spec"]["terminationGracePeriodSeconds"] = 2
    cluster.kube.create(rest.PODS, body, namespace)
    pod = wait_running(cluster.kube, namespace, "stuck", timeout=120)
    claim = pod_claims(cluster.kube, pod)["gpu"]
    prepared = _cdi_specs_naming(cluster, node, claim["metadata"]["uid"])
    assert prepared or cluster.cdi_dir(node) is None, "the driver wrote no CDI spec for the prepared claim"
    with disruptor.restoring(node):
        disruptor.stop_driver(node)
        cluster.kube.delete(rest.PODS, "stuck", namespace, grace_seconds=2)
        time.sleep(STUCK_WATCH_S)
        try:
            stuck = cluster.kube.get(rest.PODS, "stuck", namespace)
        except rest.NotFound:
            pytest.fail(f"the pod was removed within {STUCK_WATCH_S:.0f}s although its driver could not unprepare it")
        assert stuck["metadata"].get("deletionTimestamp"), "the pod was not being deleted"
        disruptor.start_driver(node)
        returned = time.monotonic()
        wait_for_deletion(cluster.kube, rest.PODS, "stuck", 90, namespace)
        gone_after = time.monotonic() - returned
    watch_until(cluster.kube, rest.RESOURCE_SLICES, lambda items: any(s["spec"].get("nodeName") == node for s in items),
                FREE_DEADLINE_S, f"the restarted driver of {node} to publish again", field_selector=f"spec.driver={cluster.driver}")
    left = _cdi_specs_naming(cluster, node, claim["metadata"]["uid"])
    finding = (f"pod {namespace}/stuck stayed Terminating for {STUCK_WATCH_S:.0f}s while the driver of {node} was "
               f"stopped; it was removed {gone_after:.1f}s after the driver returned and unprepared its claim")
    evidence.record(node=node, finding=finding, cdi_specs_while_prepared=prepared, cdi_specs_after=left)
    assert not left, f"CDI specs of the claim remain after unprepare: {left}"
