"""Parity with the example driver's own e2e test: the specs no other suite covers.

The driver's e2e (sigs.k8s.io/dra-example-driver v0.4.0, ``test/e2e``) is how its authors
decide a release works; a user validating a version wants the same specs asked of their
cluster. Most map onto checks elsewhere (the README's parity table says where); this
module holds the rest, each named after the spec it mirrors, asserting what upstream
asserts and the outcome a user relies on (which device, shared with whom). Where a version
cannot pass a spec, the check skips with the reason (the API version it does not serve),
and the evidence names what each version serves, since upstream's manifests are written for
one: its PodGroup manifest says ``scheduling.k8s.io/v1alpha2``, which 1.37 no longer serves.
"""

from __future__ import annotations

import hashlib

import pytest

from dra_harness.checks.sharing import group_sharing_problems
from dra_harness.kube import builders, rest
from dra_harness.kube.pods import allocated_devices, pod_claims, wait_running
from dra_harness.labels import RUN_LABEL

#: PodGroup versions, newest first: v1alpha2 (1.36, upstream's manifest), v1alpha3 and v1beta1 (1.37).
PODGROUP_VERSIONS = ("v1beta1", "v1alpha3", "v1alpha2")
UPSTREAM_PODGROUP_VERSION = "v1alpha2"


def _pod_groups(cluster) -> rest.Resource:
    res = rest.served(cluster.kube, "scheduling.k8s.io", "podgroups", "PodGroup", PODGROUP_VERSIONS, namespaced=True)
    if res is None:
        pytest.skip(f"Kubernetes {cluster.server_version()} serves no PodGroup in {', '.join(PODGROUP_VERSIONS)} "
                    "(needs GenericWorkload and scheduling.k8s.io enabled in the API server's runtime config)")
    return res


def test_pods_of_each_pod_group_share_one_gpu_and_the_groups_get_different_ones(cluster, namespace, evidence):
    """Upstream: "Should share 1 GPU among the Pods in each of 2 PodGroups" (a gang of 2, a claim per group)."""
    res = _pod_groups(cluster)
    upstream_served = rest.served(cluster.kube, "scheduling.k8s.io", "podgroups", "PodGroup",
                                  (UPSTREAM_PODGROUP_VERSION,), namespaced=True) is not None
    cluster.template(namespace, "one-gpu")
    claim_ref = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    for group in ("group-1", "group-2"):
        cluster.kube.create(res, {"apiVersion": res.api_version, "kind": "PodGroup",
                                  "metadata": {"name": group, "labels": {RUN_LABEL: cluster.run_id}},
                                  "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "resourceClaims": claim_ref}},
                         namespace)
        for member in ("a", "b"):
            body = builders.pod(f"{group}-{member}", cluster.run_id, claims={"gpu": {"template": "one-gpu"}})
            body["spec"]["schedulingGroup"] = {"podGroupName": group}
            cluster.kube.create(rest.PODS, body, namespace)
    devices: dict[str, set[str]] = {}
    claims: dict[str, set[str]] = {}
    for group in ("group-1", "group-2"):
        for member in ("a", "b"):
            pod = wait_running(cluster.kube, namespace, f"{group}-{member}", timeout=60)
            claim = pod_claims(cluster.kube, pod)["gpu"]
            claims.setdefault(group, set()).add(claim["metadata"]["name"])
            devices.setdefault(group, set()).update(str(d) for d in allocated_devices(claim))
    evidence.record(podgroup_version=res.api_version, upstream_manifest_version=f"scheduling.k8s.io/{UPSTREAM_PODGROUP_VERSION}",
                    upstream_manifest_served=upstream_served, claims={g: sorted(c) for g, c in claims.items()},
                    devices={g: sorted(d) for g, d in devices.items()},
                    findings=[] if upstream_served else [
                        f"upstream's PodGroup manifest (scheduling.k8s.io/{UPSTREAM_PODGROUP_VERSION}) is not served by "
                        f"{cluster.server_version()}: applied as written it fails; this version serves {res.api_version}"])
    problems = group_sharing_problems(claims, devices)
    assert not problems, problems


def test_pods_asking_for_an_extended_resource_get_one_gpu_each_through_a_generated_claim(cluster, namespace, evidence):
    """Upstream: "should allocate 1 GPU per pod for extended resource requests" (the class's implicit name and its own)."""
    tag = hashlib.sha256(namespace.encode()).hexdigest()[:8]
    cls, name = f"{namespace}-ext", f"dra-harness.io/gpu-{tag}"  # unique: classes may not share an extended resource name
    try:
        created = cluster.kube.create(rest.DEVICE_CLASSES, {
            "metadata": {"name": cls, "labels": {RUN_LABEL: cluster.run_id}},
            "spec": {"selectors": [builders.cel(f"device.driver == '{cluster.driver}'")], "extendedResourceName": name}})
    except rest.ApiError as e:
        if e.status != 403:
            raise
        pytest.skip("needs a DeviceClass of its own (an extended resource name is the class's), which the harness's "
                    f"roles on a shared cluster do not grant (deploy/rbac): {e.message}")
    try:
        if created["spec"].get("extendedResourceName") != name:
            pytest.skip(f"Kubernetes {cluster.server_version()} drops DeviceClass extendedResourceName (DRAExtendedResource off)")
        asks = {"implicit": f"deviceclass.resource.kubernetes.io/{cls}", "named": name}
        for pod, resource in asks.items():
            body = builders.pod(pod, cluster.run_id)
            body["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"}}
            cluster.kube.create(rest.PODS, body, namespace)
        seen: dict[str, dict] = {}
        for pod, resource in asks.items():
            status = wait_running(cluster.kube, namespace, pod, timeout=60)["status"]
            ext = status.get("extendedResourceClaimStatus") or {}
            claim = cluster.kube.get(rest.RESOURCE_CLAIMS, ext.get("resourceClaimName", "?"), namespace)
            seen[pod] = {"claim": claim["metadata"]["name"], "mappings": ext.get("requestMappings"),
                         "devices": [str(d) for d in allocated_devices(claim)]}
            assert [m.get("resourceName") for m in ext.get("requestMappings") or []] == [resource], (pod, ext)
            assert len(seen[pod]["devices"]) == 1, (pod, seen[pod])
        evidence.record(device_class=cls, extended_resource_name=name, pods=seen)
        assert seen["implicit"]["devices"] != seen["named"]["devices"], f"both pods got {seen['named']['devices']}"
    finally:
        for pod in ("implicit", "named"):
            cluster.kube.delete(rest.PODS, pod, namespace, grace_seconds=0)
        cluster.kube.delete(rest.DEVICE_CLASSES, cls)
