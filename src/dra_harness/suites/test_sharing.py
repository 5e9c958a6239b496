"""Sharing and isolation: who gets the same device, who never does, and where tenants meet.

From the guidance: containers of one pod that reference one claim share its device;
pods that reference one ResourceClaim share its device and must land on its node;
pods that use templates never share; a shared claim stays allocated until its last
consumer is gone. Sharing a device is not isolation, so a claim reserved for pods of
different tenants is reported as a finding. What containers actually see can only be
checked where containers run (real kubelet or GPU nodes).
"""

from __future__ import annotations

import pytest

from dra_harness.checks import needs
from dra_harness.errors import NotEstablished
from dra_harness.checks.incontainer import (
    claim_uids,
    devices_seen,
    mismatch,
    probe_pod,
    read_env,
    settings,
)
from dra_harness.kube import rest
from dra_harness.kube.pods import (
    allocated_devices,
    allocated_node,
    placement,
    pod_claims,
    reserved_for,
    wait_running,
)
from dra_harness.kube.waits import wait_for_deletion, wait_for_object, watch_until
from dra_harness.labels import RUN_LABEL
from dra_harness.checks.sharing import NOTHING_AUDITED, audited_claims, double_allocations, tenant_crossings

pytestmark = pytest.mark.concern("sharing", "Sharing and isolation")


SIMULATED = "containers do not run on simulated (KWOK) nodes, so there is no in-container view to compare"


def test_containers_of_one_pod_referencing_one_claim_get_the_same_device(cluster, namespace, evidence):
    cluster.template(namespace, "gpu")
    cluster.pod(namespace, "two-containers", template="gpu", containers=2)
    pod = wait_running(cluster.kube, namespace, "two-containers")
    claims = pod_claims(cluster.kube, pod)
    assert list(claims) == ["gpu"]
    devices = allocated_devices(claims["gpu"])
    assert len(devices) == 1, f"one claim, one device expected; got {[str(d) for d in devices]}"
    used = [[c["name"] for c in ctr["resources"]["claims"]] for ctr in pod["spec"]["containers"]]
    assert used == [["gpu"], ["gpu"]], f"containers reference {used}"
    assert reserved_for(claims["gpu"]) == ["two-containers"]
    evidence.record(device=str(devices[0]), containers=len(used))


def test_pods_sharing_a_claim_see_the_same_device_on_its_node(cluster, namespace, evidence):
    cluster.claim(namespace, "shared")
    consumers = ["reader-0", "reader-1", "reader-2"]
    for name in consumers:
        cluster.pod(namespace, name, claim="shared")
    nodes = {name: wait_running(cluster.kube, namespace, name)["spec"]["nodeName"] for name in consumers}
    claim = cluster.kube.get(rest.RESOURCE_CLAIMS, "shared", namespace)
    devices = allocated_devices(claim)
    assert len(devices) == 1, f"the shared claim holds {[str(d) for d in devices]}"
    assert set(nodes.values()) == {allocated_node(claim)}, f"consumers ran on {nodes}, claim pinned to {allocated_node(claim)}"
    assert sorted(reserved_for(claim)) == consumers
    evidence.record(device=str(devices[0]), node=allocated_node(claim), reserved_for=reserved_for(claim))


def test_pods_using_templates_never_share_a_device(cluster, preflight, namespace, evidence):
    """Pods that find no free device wait Unschedulable, which is no sharing: another run or tenant may take
    devices meanwhile, so the check judges the pods that run, and needs two of them."""
    cluster.template(namespace, "gpu")
    schedulable = {n.name for n in preflight.nodes.values() if n.schedulable}
    held = cluster.allocations()
    free = len([k for k, v in cluster.published().items() if v["node"] in schedulable and k not in held])
    quota = preflight.namespace_device_quota()  # as many as the cluster's quota lets one namespace ask for
    pods = [f"solo-{i}" for i in range(max(1, min(8, free, quota[1] if quota else 8)))]
    for name in pods:
        cluster.pod(namespace, name, template="gpu")
    settled = watch_until(cluster.kube, rest.PODS, lambda ps: len(ps) == len(pods) and all(placement(p) != "pending" for p in ps), 60,
                          "every pod to run or be found unschedulable", namespace=namespace)
    running = [p["metadata"]["name"] for p in settled if p["status"].get("phase") == "Running"]
    if len(running) < 2:
        raise NotEstablished(f"only {len(running)} of {len(pods)} pods found a free device: nothing to share")
    # Checked over every allocation in the cluster at once, not just ours.
    claims = cluster.kube.list(rest.RESOURCE_CLAIMS)
    shareable = {k for k, v in cluster.published().items() if v["device"].get("allowMultipleAllocations")}
    findings = double_allocations(claims, shareable)
    assert not findings, "\n".join(f.message for f in findings)
    ours = [d for c in claims if c["metadata"]["namespace"] == namespace for d in allocated_devices(c)]
    # A pod found unschedulable may have been placed since: count our claims' devices, at least one per running pod.
    assert len({d.key for d in ours}) == len(ours) >= len(running), f"{len(running)} pods run on {[str(d) for d in ours]}"
    evidence.record(claims_checked=len(claims), our_devices=len(ours), pods=len(pods), running=len(running))


def test_a_shared_claim_stays_allocated_until_its_last_consumer_is_gone(cluster, namespace, evidence):
    kube = cluster.kube
    cluster.claim(namespace, "shared")
    for name in ("first", "last"):
        cluster.pod(namespace, name, claim="shared")
        wait_running(kube, namespace, name)
    device = allocated_devices(kube.get(rest.RESOURCE_CLAIMS, "shared", namespace))[0]

    kube.delete(rest.PODS, "first", namespace)
    wait_for_deletion(kube, rest.PODS, "first", 30, namespace)
    claim = wait_for_object(kube, rest.RESOURCE_CLAIMS, "shared", lambda c: reserved_for(c) == ["last"], 30,
                            "the departed consumer to leave reservedFor", namespace)
    assert allocated_devices(claim) == [device], "the claim lost its device while a consumer remained"

    kube.delete(rest.PODS, "last", namespace)
    claim = wait_for_object(kube, rest.RESOURCE_CLAIMS, "shared", lambda c: not c.get("status", {}).get("allocation"), 30,
                            "the claim to be deallocated after its last consumer", namespace)
    assert not reserved_for(claim)
    evidence.record(device=str(device), deallocated=True)


def test_the_tenant_audit_reports_a_claim_shared_across_tenants(cluster, namespace, tenant_label, evidence):
    kube = cluster.kube
    cluster.claim(namespace, "crossing")
    cluster.claim(namespace, "same-tenant")
    for name, claim, tenant in [("a-1", "crossing", "team-a"), ("b-1", "crossing", "team-b"),
                                ("a-2", "same-tenant", "team-a"), ("a-3", "same-tenant", "team-a")]:
        cluster.pod(namespace, name, claim=claim, labels={tenant_label: tenant})
        wait_running(kube, namespace, name)
    findings = tenant_crossings(kube.list(rest.RESOURCE_CLAIMS, namespace), kube.list(rest.PODS, namespace), tenant_label)
    assert [f.kind for f in findings] == ["tenant-crossing"], [f.message for f in findings]
    assert f"{namespace}/crossing" in findings[0].message and "team-a" in findings[0].message and "team-b" in findings[0].message
    evidence.record(finding=findings[0].message)


def test_no_existing_claim_is_shared_across_tenants(cluster, tenant_label, run_id, evidence):
    """The audit over everything no run of the harness created (another run's deliberate
    crossings, made at the same time on the same cluster, are not the cluster's). Only claims
    reserved for pods can cross tenants: with none, the report shows the check as not
    established, never as passed."""
    harness = {n["metadata"]["name"] for n in cluster.kube.list(rest.NAMESPACES, label_selector=RUN_LABEL)}
    claims = [c for c in cluster.kube.list(rest.RESOURCE_CLAIMS) if c["metadata"]["namespace"] not in harness]
    pods = cluster.kube.list(rest.PODS)
    audited = audited_claims(claims, pods)
    findings = tenant_crossings(audited, pods, tenant_label)
    evidence.record(claims_audited=len(audited), claims_listed=len(claims), tenant_label=tenant_label,
                    findings=[f.message for f in findings])
    if not audited:
        evidence.record(not_established=NOTHING_AUDITED)
    assert not findings, "\n".join(f.message for f in findings)


def _container_nodes(cluster) -> list[str]:
    if cluster.profile.container_view != "env":
        pytest.skip(f"the {cluster.profile.name} profile's containers are checked with NVML (suites/test_gpu_visibility.py)")
    nodes = cluster.container_nodes()
    if not nodes:
        pytest.skip(SIMULATED)
    return nodes


def _views(cluster, namespace: str, pods: list[str]) -> dict[tuple[str, str], set[str]]:
    """(pod, container) -> device names the container sees, read from the probe's log.

    Where the driver stamps claim UIDs into the container, they must be the pod's own claims.
    """
    views = {}
    for name in pods:
        pod = wait_running(cluster.kube, namespace, name, timeout=120)
        own = {c["metadata"]["uid"] for c in pod_claims(cluster.kube, pod).values()}
        for ctr in pod["spec"]["containers"]:
            env = read_env(cluster.kube, namespace, name, ctr["name"])
            assert claim_uids(env) <= own, f"{name}/{ctr['name']} was prepared from claims {claim_uids(env) - own}, not its own {own}"
            views[(name, ctr["name"])] = devices_seen(env)
    return views


def _allocated_names(cluster, namespace: str, pod_name: str) -> set[str]:
    pod = cluster.kube.get(rest.PODS, pod_name, namespace)
    return {d.device for c in pod_claims(cluster.kube, pod).values() for d in allocated_devices(c)}


@pytest.mark.requires(needs.pullable_image)
@pytest.mark.parametrize("case", ["one-pod-two-containers", "pods-sharing-a-claim", "template-pods"])
def test_containers_see_exactly_their_allocated_devices(cluster, namespace, case, evidence):
    node = _container_nodes(cluster)[0]
    image = cluster.probe_image
    if case == "one-pod-two-containers":
        cluster.template(namespace, "gpu")
        pods = ["two-containers"]
        cluster.kube.create(rest.PODS, probe_pod(pods[0], cluster.run_id, image, node, {"gpu": {"template": "gpu"}}, 2), namespace)
    elif case == "pods-sharing-a-claim":
        cluster.claim(namespace, "shared")
        pods = ["reader-0", "reader-1"]
        for name in pods:
            cluster.kube.create(rest.PODS, probe_pod(name, cluster.run_id, image, node, {"gpu": {"claim": "shared"}}), namespace)
    else:
        cluster.template(namespace, "gpu")
        pods = ["solo-0", "solo-1"]
        for name in pods:
            cluster.kube.create(rest.PODS, probe_pod(name, cluster.run_id, image, node, {"gpu": {"template": "gpu"}}), namespace)
    views = _views(cluster, namespace, pods)
    for (pod, ctr), seen in views.items():
        why = mismatch(seen, _allocated_names(cluster, namespace, pod))
        assert why is None, f"{pod}/{ctr}: {why}"
    distinct = {frozenset(v) for v in views.values()}
    if case == "template-pods":
        assert len(distinct) == len(pods), f"template pods share a device in their containers: {views}"
    else:
        assert len(distinct) == 1, f"consumers of one claim see different devices: {views}"
    evidence.record(node=node, views={f"{p}/{c}": sorted(v) for (p, c), v in views.items()})


@pytest.mark.requires(needs.pullable_image)
def test_a_container_that_does_not_list_the_claim_sees_none_of_its_devices_while_its_sibling_does(cluster, namespace, evidence):
    """KAR-0049's multi-container isolation case: a claim belongs to the containers that list it in
    ``resources.claims``, not to the whole pod. The sibling that lists it must see the device, so an
    empty view is the driver's isolation, not a probe that reads nothing."""
    node = _container_nodes(cluster)[0]
    cluster.template(namespace, "gpu")
    body = probe_pod("one-lists", cluster.run_id, cluster.probe_image, node, {"gpu": {"template": "gpu"}}, 2)
    body["spec"]["containers"][1]["resources"]["claims"] = []
    cluster.kube.create(rest.PODS, body, namespace)
    views = _views(cluster, namespace, ["one-lists"])
    allocated = _allocated_names(cluster, namespace, "one-lists")
    listing, other = views[("one-lists", "ctr0")], views[("one-lists", "ctr1")]
    evidence.record(node=node, allocated=sorted(allocated), listing_container=sorted(listing), other_container=sorted(other))
    assert mismatch(listing, allocated) is None, f"the container that lists the claim: {mismatch(listing, allocated)}"
    assert not other, f"the container that does not list the claim sees {sorted(other)} (allocated to its pod: {sorted(allocated)})"


GPU_CONFIGS = {
    "time-slicing": ({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
                     {"SHARING_STRATEGY": "TimeSlicing", "TIMESLICE_INTERVAL": "Long"}),
    "space-partitioning": ({"strategy": "SpacePartitioning", "spacePartitioningConfig": {"partitionCount": 10}},
                           {"SHARING_STRATEGY": "SpacePartitioning", "PARTITION_COUNT": "10"}),
}


@pytest.mark.requires(needs.pullable_image)
@pytest.mark.parametrize("strategy", sorted(GPU_CONFIGS))
def test_the_sharing_settings_of_an_opaque_gpu_config_reach_the_container(cluster, namespace, strategy, evidence):
    if cluster.driver != "gpu.example.com":
        pytest.skip(f"GpuConfig is the example driver's parameter type; the driver here is {cluster.driver}")
    node = _container_nodes(cluster)[0]
    sharing, expected = GPU_CONFIGS[strategy]
    config = [{"requests": ["gpu"], "opaque": {"driver": cluster.driver, "parameters": {
        "apiVersion": "gpu.resource.example.com/v1alpha1", "kind": "GpuConfig", "sharing": sharing}}}]
    cluster.claim(namespace, "configured", config=config)
    cluster.kube.create(rest.PODS, probe_pod("configured", cluster.run_id, cluster.probe_image, node,
                                             {"gpu": {"claim": "configured"}}, 2), namespace)
    views = _views(cluster, namespace, ["configured"])
    device = allocated_devices(cluster.kube.get(rest.RESOURCE_CLAIMS, "configured", namespace))[0].device
    for ctr in ("ctr0", "ctr1"):
        env = read_env(cluster.kube, namespace, "configured", ctr)
        assert views[("configured", ctr)] == {device}
        got = {k: v for k, v in settings(env, device).items() if k in expected}
        assert got == expected, f"{ctr} sees settings {settings(env, device)} for {device}; the claim's GpuConfig says {expected}"
    evidence.record(node=node, device=device, settings=expected)
