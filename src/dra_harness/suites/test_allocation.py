"""Allocation: kube-scheduler gives each claim the devices it asked for, and takes them back.

These checks read the guidance on ResourceClaimTemplates, CEL selectors and the
request modes: every pod from a template gets its own device on its own node; a
selector on capacity is evaluated; ExactCount, All and firstAvailable allocate what
they say; a missing DeviceClass and an unsatisfiable selector leave the pod Pending
with the scheduler's reason; quota on devices is enforced at claim creation; and
generated claims are released and deleted when their pods go, however fast pods churn.
"""

from __future__ import annotations

import time

import pytest

from dra_harness.kube import rest
from dra_harness.kube.events import events_for
from dra_harness.kube.pods import (
    allocated_devices,
    allocated_node,
    claim_names,
    pod_claims,
    scheduling_message,
    wait_running,
    wait_unschedulable,
)
from dra_harness.kube.waits import wait_for_deletion, watch_until
from dra_harness.checks import needs

pytestmark = pytest.mark.concern("allocation", "Allocation")


CLAIM_RELEASE_DEADLINE_S = 30.0


def _memory_at_least(cluster, quantity: str) -> str:
    return f"{cluster.profile.cel_capacity('memory')}.compareTo(quantity('{quantity}')) >= 0"


#: The most devices one ResourceClaim may be allocated (the allocator: "exceeds the claim limit of 32").
CLAIM_DEVICE_LIMIT = 32


def _allocated_claim(cluster, namespace, pod_name):
    pod = wait_running(cluster.kube, namespace, pod_name, timeout=60)
    return pod, pod_claims(cluster.kube, pod)["gpu"]


def test_pods_from_a_claim_template_get_distinct_devices_on_their_own_node(cluster, preflight, namespace, evidence):
    needs.demand(preflight, needs.free_devices(2))  # two pods at least, or distinctness says nothing
    cluster.template(namespace, "one-gpu")
    pods = [f"worker-{i}" for i in range(min(6, preflight.free_total()))]  # what others leave free, not the hardware
    for name in pods:
        cluster.pod(namespace, name, template="one-gpu")

    published = cluster.published()
    seen: dict[tuple, str] = {}
    for name in pods:
        pod, claim = _allocated_claim(cluster, namespace, name)
        devices = allocated_devices(claim)
        assert len(devices) == 1, f"{name}: claim {claim['metadata']['name']} has {len(devices)} devices, expected 1"
        dev, node = devices[0], pod["spec"]["nodeName"]
        assert dev.driver == cluster.driver
        assert allocated_node(claim) == node, f"{name} runs on {node} but its claim is pinned to {allocated_node(claim)}"
        assert published[dev.key]["node"] == node, f"{name} on {node} got {dev}, which is published for another node"
        assert dev.key not in seen, f"{name} and {seen.get(dev.key)} were both given {dev}"
        seen[dev.key] = name
        evidence.record(pod=name, node=node, device=str(dev))


def test_a_claim_for_several_devices_gets_distinct_devices_on_one_node(cluster, preflight, namespace, evidence):
    count = min(4, min(cluster.expected.nodes.values()))
    needs.demand(preflight, needs.free_devices(count, same_node=True))
    cluster.template(namespace, "multi", cluster.request(count=count))
    cluster.pod(namespace, "multi", template="multi")
    pod, claim = _allocated_claim(cluster, namespace, "multi")
    devices = allocated_devices(claim)
    published = cluster.published()
    assert len({d.key for d in devices}) == count, f"asked for {count} devices, got {[str(d) for d in devices]}"
    nodes = {published[d.key]["node"] for d in devices}
    assert nodes == {pod["spec"]["nodeName"]}, f"devices come from {nodes}, pod runs on {pod['spec']['nodeName']}"
    evidence.record(count=count, node=pod["spec"]["nodeName"], devices=[str(d) for d in devices])


@pytest.mark.exclusive
@pytest.mark.requires(needs.whole_node(), needs.namespace_devices(
    lambda f: min(needs.largest_node(f), CLAIM_DEVICE_LIMIT), "a node's devices, at most a claim's limit"))
def test_allocation_mode_all_takes_every_matching_device_of_a_node(cluster, namespace, evidence):
    largest = max(cluster.expected.nodes.values())
    limited = largest > CLAIM_DEVICE_LIMIT
    # A node of more devices than one claim may hold: an All request there can never be met (the allocator says
    # "exceeds the claim limit of 32"), a fact of the API, not a fault. The request is sized to the limit instead.
    selectors = [f"{cluster.profile.cel_attribute('index')} < {CLAIM_DEVICE_LIMIT}"] if limited else None
    cluster.template(namespace, "everything", cluster.request(all_devices=True, selectors=selectors))
    cluster.pod(namespace, "greedy", template="everything")
    pod, claim = _allocated_claim(cluster, namespace, "greedy")
    node = pod["spec"]["nodeName"]
    on_node = {k for k, v in cluster.published().items() if v["node"] == node and (
        not limited or (cluster.profile.device_attribute(v["device"], "index") or 0) < CLAIM_DEVICE_LIMIT)}
    if limited:
        evidence.record(findings=f"nodes publish up to {largest} devices, more than the {CLAIM_DEVICE_LIMIT} one "
                                 f"ResourceClaim may be allocated: a request for a whole node needs a selector "
                                 f"sized to the limit, or several claims")
    got = {d.key for d in allocated_devices(claim)}
    assert got == on_node, f"All allocated {len(got)} devices; {node} publishes {len(on_node)}"
    evidence.record(node=node, devices=len(got))


@pytest.mark.exclusive
def test_first_available_prefers_the_first_alternative_and_falls_back_when_it_is_exhausted(cluster, namespace, evidence):
    profile = cluster.profile
    # One device per node carries the highest index: the preferred alternative runs out after one pod per
    # node that can take it (schedulable, that device free: on a shared cluster others hold devices too).
    # The pods may use only those nodes: a node that turns schedulable, or a device another test frees,
    # while the pods arrive would add a preferred device the count below did not see.
    top_index = min(cluster.expected.nodes.values()) - 1
    schedulable = set(cluster.schedulable_nodes())
    held = cluster.allocations()
    published = cluster.published()
    nodes = sorted(v["node"] for k, v in published.items() if v["node"] in schedulable and k not in held
                   and profile.device_attribute(v["device"], "index") == top_index)
    if not nodes:
        pytest.skip(f"no schedulable node has its device of index {top_index} free")
    top = {k for k, v in published.items() if v["node"] in nodes and profile.device_attribute(v["device"], "index") == top_index}
    free = sum(1 for k, v in published.items() if v["node"] in nodes and k not in held)
    if free < len(nodes) + 2:  # two pods beyond the preferred devices must find a fallback device
        pytest.skip(f"{free} free devices on {nodes}: the fallback needs {len(nodes) + 2} "
                    "(one pod per preferred device, two more)")
    preferred = cluster.request("preferred", selectors=[f"{profile.cel_attribute('index')} == {top_index}"])
    fallback = cluster.request("fallback")
    from dra_harness.kube.builders import first_available

    cluster.template(namespace, "choice", first_available("gpu", [preferred, fallback]))
    pods = [f"p{i}" for i in range(len(nodes) + 2)]
    chosen: dict[str, str] = {}
    taken_by_others: set[tuple[str, str, str]] = set()
    for name in pods:
        cluster.pod(namespace, name, template="choice", nodes=nodes)
        _, claim = _allocated_claim(cluster, namespace, name)  # one at a time: arrival order is the preference order
        chosen[name] = allocated_devices(claim)[0].request
        if chosen[name] == "gpu/fallback" and list(chosen.values()).count("gpu/fallback") == 1:
            # The first fallback: every preferred device on these nodes must be held by now (another
            # test may have taken one since the count above; then this run prefers one fewer).
            now = cluster.allocations()
            assert top <= now.keys(), f"{name} fell back while {sorted(top - now.keys())} were free; chosen: {chosen}"
            taken_by_others = {k for k in top if not any(c.startswith(f"{namespace}/") for c in now[k])}
    preferred_pods = [p for p, r in chosen.items() if r == "gpu/preferred"]
    assert preferred_pods == pods[: len(nodes) - len(taken_by_others)], f"subrequests chosen: {chosen}"
    assert all(chosen[p] == "gpu/fallback" for p in pods[len(preferred_pods):]), f"subrequests chosen: {chosen}"
    evidence.record(chosen=chosen, nodes_with_the_preferred_device_free=nodes,
                    preferred_devices_taken_by_others=sorted("/".join(k) for k in taken_by_others))


def test_a_capacity_selector_is_honoured(cluster, namespace, evidence):
    enough, too_much = _memory_at_least(cluster, "64Gi"), _memory_at_least(cluster, "4096Gi")
    cluster.template(namespace, "big-gpu", cluster.request(selectors=[enough]))
    cluster.template(namespace, "huge-gpu", cluster.request(selectors=[too_much]))
    cluster.pod(namespace, "fits", template="big-gpu")
    cluster.pod(namespace, "does-not-fit", template="huge-gpu")

    _, claim = _allocated_claim(cluster, namespace, "fits")
    dev = allocated_devices(claim)[0]
    memory = cluster.published()[dev.key]["device"]["capacity"][cluster.profile.capacity["memory"]]["value"]
    from dra_harness.checks.cel import Quantity

    assert Quantity(memory) >= Quantity("64Gi"), f"selector '{enough}' allocated {dev} with memory {memory}"
    wait_unschedulable(cluster.kube, namespace, "does-not-fit", timeout=60)
    evidence.record(selector=enough, device=str(dev), memory=memory, rejected_selector=too_much)


def test_an_unsatisfiable_selector_leaves_the_pod_pending_with_the_schedulers_reason(cluster, namespace, evidence):
    impossible = f"{cluster.profile.cel_attribute('model')} == 'NO-SUCH-MODEL'"
    cluster.template(namespace, "no-gpu", cluster.request(selectors=[impossible]))
    cluster.pod(namespace, "waiting", template="no-gpu")

    pod = wait_unschedulable(cluster.kube, namespace, "waiting", timeout=60)
    message = scheduling_message(pod)
    assert "cannot allocate all claims" in message, f"unexpected scheduler reason: {message}"
    time.sleep(2)  # still Pending a moment later, and nothing allocated
    pod = cluster.kube.get(rest.PODS, "waiting", namespace)
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    for claim in pod_claims(cluster.kube, pod).values():
        assert not allocated_devices(claim), f"claim {claim['metadata']['name']} was allocated {allocated_devices(claim)}"
    evidence.record(selector=impossible, scheduler_message=message)


def test_a_missing_device_class_gives_the_schedulers_reason(cluster, namespace, evidence):
    missing = f"no-such-class-{namespace[-5:]}"
    cluster.template(namespace, "ghost", cluster.request(device_class=missing))
    cluster.pod(namespace, "ghost", template="ghost")
    message = scheduling_message(wait_unschedulable(cluster.kube, namespace, "ghost", timeout=60))
    assert f"device class {missing} does not exist" in message, message
    evidence.record(device_class=missing, scheduler_message=message)


def test_a_resource_quota_on_devices_is_enforced_at_claim_creation(cluster, namespace, evidence):
    key = f"{cluster.device_class}.deviceclass.resource.k8s.io/devices"
    cluster.kube.create(rest.RESOURCE_QUOTAS, {"metadata": {"name": "gpus"}, "spec": {"hard": {key: "2"}}}, namespace)
    watch_until(cluster.kube, rest.RESOURCE_QUOTAS, lambda q: bool(q and q[0].get("status", {}).get("hard")), 30,
                "quota to be observed", namespace=namespace)
    cluster.template(namespace, "two", cluster.request(count=2))
    cluster.template(namespace, "one", cluster.request())
    cluster.pod(namespace, "within-quota", template="two")
    wait_running(cluster.kube, namespace, "within-quota")
    cluster.pod(namespace, "over-quota", template="one")

    def failed_creation(_):
        return [e for e in events_for(cluster.kube, namespace, "over-quota") if e.get("reason") == "FailedResourceClaimCreation"]

    watch_until(cluster.kube, rest.EVENTS, lambda items: bool(failed_creation(items)), 60,
                "FailedResourceClaimCreation for over-quota", namespace=namespace)
    message = failed_creation(None)[-1]["message"]
    assert "exceeded quota" in message, message
    pod = cluster.kube.get(rest.PODS, "over-quota", namespace)
    assert pod["status"]["phase"] == "Pending" and not claim_names(pod), "the over-quota pod got a claim"
    evidence.record(quota={key: "2"}, event=message)


def test_rapid_create_delete_cycles_leak_no_claim_or_allocation(cluster, namespace, evidence):
    cycles = 10
    cluster.template(namespace, "churn")
    started = time.monotonic()
    claims = []
    for i in range(cycles):
        cluster.pod(namespace, f"churn-{i}", template="churn")
        pod = wait_running(cluster.kube, namespace, f"churn-{i}")
        claims.append(claim_names(pod)["gpu"])
        cluster.kube.delete(rest.PODS, f"churn-{i}", namespace)
    for claim in claims:
        wait_for_deletion(cluster.kube, rest.RESOURCE_CLAIMS, claim, CLAIM_RELEASE_DEADLINE_S, namespace)
    took = time.monotonic() - started
    # Cluster-wide: no allocation is reserved for a pod that no longer exists. Other runs' namespaces
    # are left out: their pods come and go while this runs, and their claims are not the cluster's.
    others = cluster.other_runs_namespaces()
    live = {p["metadata"]["uid"] for p in cluster.kube.list(rest.PODS)}
    orphans = [
        f"{c['metadata']['namespace']}/{c['metadata']['name']}"
        for c in cluster.kube.list(rest.RESOURCE_CLAIMS)
        if c["metadata"]["namespace"] not in others and any(r["uid"] not in live for r in c.get("status", {}).get("reservedFor") or [] if r.get("resource") == "pods")
    ]
    assert not orphans, f"claims reserved for pods that are gone: {orphans}"
    evidence.record(cycles=cycles, seconds=round(took, 2), claims_deleted=len(claims))


def test_deleting_the_pod_releases_and_deletes_its_generated_claim(cluster, namespace, evidence):
    cluster.template(namespace, "one-gpu")
    cluster.pod(namespace, "short-lived", template="one-gpu")
    _pod, claim = _allocated_claim(cluster, namespace, "short-lived")
    device = allocated_devices(claim)[0]

    started = time.monotonic()
    cluster.kube.delete(rest.PODS, "short-lived", namespace)
    wait_for_deletion(cluster.kube, rest.RESOURCE_CLAIMS, claim["metadata"]["name"], CLAIM_RELEASE_DEADLINE_S, namespace)
    released_after = time.monotonic() - started
    # Another run sharing the cluster may take the freed device at once; only this run's claims count.
    holders = cluster.allocations(other_runs=False).get(device.key, [])
    assert not holders, f"{device} is still allocated to {holders}"
    evidence.record(claim=claim["metadata"]["name"], device=str(device), claim_deleted_after_s=round(released_after, 3))
