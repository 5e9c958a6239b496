"""Allocation: kube-scheduler gives each claim the devices it asked for, and takes them back.

These checks read the guidance on ResourceClaimTemplates and CEL selectors: every pod
from a template gets its own device, on the node the pod runs on; a selector on
capacity is evaluated (a satisfiable bound allocates, an impossible one does not);
an unsatisfiable claim leaves the pod Pending with the scheduler's reason; and the
generated claim is released and deleted when its pod goes.
"""

from __future__ import annotations

import time

from dra_harness.kube import builders as b
from dra_harness.kube import rest
from dra_harness.kube.pods import (
    allocated_devices,
    allocated_node,
    claim_names,
    pod_claims,
    scheduling_message,
    wait_running,
    wait_unschedulable,
)
from dra_harness.kube.waits import wait_for_deletion

CLAIM_RELEASE_DEADLINE_S = 30.0


def _memory_at_least(cluster, quantity: str) -> str:
    return f"device.capacity['{cluster.driver}'].memory.compareTo(quantity('{quantity}')) >= 0"


def _slice_devices(cluster) -> dict[tuple[str, str], dict]:
    """(pool, device) -> {node, capacity} for every published device of the driver."""
    out = {}
    for s in cluster.kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={cluster.driver}"):
        for d in s["spec"].get("devices") or []:
            out[(s["spec"]["pool"]["name"], d["name"])] = {"node": s["spec"].get("nodeName"), "device": d}
    return out


def _template_pod(cluster, namespace, name, template, **kw):
    cluster.kube.create(rest.PODS, b.pod(name, cluster.run_id, claims={"gpu": {"template": template}}, **kw), namespace)


def test_pods_from_a_claim_template_get_distinct_devices_on_their_own_node(cluster, namespace, evidence):
    kube = cluster.kube
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, b.claim_template("one-gpu", cluster.run_id, [b.exactly("gpu", cluster.device_class)]), namespace)
    pods = [f"worker-{i}" for i in range(min(6, cluster.expected.total_devices))]
    for name in pods:
        _template_pod(cluster, namespace, name, "one-gpu")

    published = _slice_devices(cluster)
    seen: dict[tuple, str] = {}
    for name in pods:
        pod = wait_running(kube, namespace, name, timeout=60)
        claim = pod_claims(kube, pod)["gpu"]
        devices = allocated_devices(claim)
        assert len(devices) == 1, f"{name}: claim {claim['metadata']['name']} has {len(devices)} devices, expected 1"
        dev = devices[0]
        assert dev.driver == cluster.driver
        node = pod["spec"]["nodeName"]
        assert allocated_node(claim) == node, f"{name} runs on {node} but its claim is pinned to {allocated_node(claim)}"
        assert published[(dev.pool, dev.device)]["node"] == node, f"{name} on {node} got {dev}, which is published for another node"
        assert dev.key not in seen, f"{name} and {seen.get(dev.key)} were both given {dev}"
        seen[dev.key] = name
        evidence.record(pod=name, node=node, device=str(dev))
    assert len(seen) == len(pods)


def test_a_capacity_selector_is_honoured(cluster, namespace, evidence):
    kube = cluster.kube
    enough = _memory_at_least(cluster, "64Gi")
    too_much = _memory_at_least(cluster, "4096Gi")
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, b.claim_template("big-gpu", cluster.run_id, [b.exactly("gpu", cluster.device_class, selectors=[enough])]), namespace)
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, b.claim_template("huge-gpu", cluster.run_id, [b.exactly("gpu", cluster.device_class, selectors=[too_much])]), namespace)
    _template_pod(cluster, namespace, "fits", "big-gpu")
    _template_pod(cluster, namespace, "does-not-fit", "huge-gpu")

    pod = wait_running(kube, namespace, "fits", timeout=60)
    dev = allocated_devices(pod_claims(kube, pod)["gpu"])[0]
    memory = _slice_devices(cluster)[(dev.pool, dev.device)]["device"]["capacity"]["memory"]["value"]
    assert _gib(memory) >= 64, f"selector '{enough}' allocated {dev} with memory {memory}"

    wait_unschedulable(kube, namespace, "does-not-fit", timeout=60)
    evidence.record(selector=enough, device=str(dev), memory=memory, rejected_selector=too_much)


def test_an_unsatisfiable_selector_leaves_the_pod_pending_with_the_schedulers_reason(cluster, namespace, evidence):
    kube = cluster.kube
    impossible = f"device.attributes['{cluster.driver}'].model == 'NO-SUCH-MODEL'"
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, b.claim_template("no-gpu", cluster.run_id, [b.exactly("gpu", cluster.device_class, selectors=[impossible])]), namespace)
    _template_pod(cluster, namespace, "waiting", "no-gpu")

    pod = wait_unschedulable(kube, namespace, "waiting", timeout=60)
    message = scheduling_message(pod)
    assert "cannot allocate all claims" in message, f"unexpected scheduler reason: {message}"
    # Still Pending a moment later, and the claim holds no allocation.
    time.sleep(2)
    pod = kube.get(rest.PODS, "waiting", namespace)
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    for claim in pod_claims(kube, pod).values():
        assert not allocated_devices(claim), f"claim {claim['metadata']['name']} was allocated {allocated_devices(claim)}"
    evidence.record(selector=impossible, scheduler_message=message)


def test_deleting_the_pod_releases_and_deletes_its_generated_claim(cluster, namespace, evidence):
    kube = cluster.kube
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, b.claim_template("one-gpu", cluster.run_id, [b.exactly("gpu", cluster.device_class)]), namespace)
    _template_pod(cluster, namespace, "short-lived", "one-gpu")
    pod = wait_running(kube, namespace, "short-lived", timeout=60)
    claim_name = claim_names(pod)["gpu"]
    device = allocated_devices(kube.get(rest.RESOURCE_CLAIMS, claim_name, namespace))[0]

    started = time.monotonic()
    kube.delete(rest.PODS, "short-lived", namespace)
    wait_for_deletion(kube, rest.RESOURCE_CLAIMS, claim_name, CLAIM_RELEASE_DEADLINE_S, namespace)
    released_after = time.monotonic() - started
    evidence.record(claim=claim_name, device=str(device), claim_deleted_after_s=round(released_after, 3))

    # The device is free again: no other claim in the cluster holds it.
    holders = [
        c["metadata"]["name"]
        for c in kube.list(rest.RESOURCE_CLAIMS)
        if any(d.key == device.key for d in allocated_devices(c))
    ]
    assert not holders, f"{device} is still allocated to {holders}"


def _gib(quantity: str) -> float:
    units = {"Ki": 2**-20, "Mi": 2**-10, "Gi": 1, "Ti": 2**10}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    return float(quantity) / 2**30

