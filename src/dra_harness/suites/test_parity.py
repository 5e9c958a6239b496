"""Parity with the example driver's own e2e test: the specs no other suite covers.

The driver's e2e (sigs.k8s.io/dra-example-driver v0.4.0, ``test/e2e``) is how its authors
decide a release works; a user validating a version wants the same specs asked of their
cluster. Most map onto checks elsewhere (docs/parity.md's table says where); this
module holds the rest, each named after the spec it mirrors, asserting what upstream
asserts and the outcome a user relies on (which device, shared with whom). Where a version
cannot pass a spec, the check skips with the reason (the API version it does not serve),
and the evidence names what each version serves, since upstream's manifests are written for
one: its PodGroup manifest says ``scheduling.k8s.io/v1alpha2``, which 1.37 no longer serves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from dra_harness.errors import NotEstablished
from dra_harness.checks import needs
from dra_harness.checks import admin_access, config_webhook, gang
from dra_harness.errors import ClusterError
from dra_harness.checks.incontainer import PRINT_ENV, devices_seen, mismatch, probe_pod, read_env
from dra_harness.checks.sharing import group_sharing_problems
from dra_harness.kube import builders, rest
from dra_harness.kube.pods import allocated_devices, pod_claims, wait_running
from dra_harness.labels import RUN_LABEL

pytestmark = pytest.mark.concern("parity", "Upstream e2e parity")


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


#: How long a gang that does not fit must stay wholly unbound: the scheduler retries it several times meanwhile.
GANG_HOLD_S = 10.0


@pytest.mark.requires(needs.free_devices(3, same_node=True))
def test_a_gang_that_does_not_fit_binds_none_of_its_pods_until_all_fit(cluster, namespace, evidence):
    """AI Conformance's gang scheduling, negative case: a PodGroup of 3 (gang minCount 3) whose claims may take
    3 devices of one node, one of them held by another pod. Partial placement would bind 2 (the negative
    control, tests/integration/test_parity_controls.py, shows plain pods doing so); a gang binds none. Then
    the holder goes and all 3 bind, on those 3 devices."""
    g = gang.start(cluster, namespace, 3, _pod_groups(cluster))
    early = gang.bound_within(cluster, namespace, g, GANG_HOLD_S)
    evidence.record(node=g.node, gang_devices=[d.get("name") for d in g.devices], held_by_holder=g.devices[-1].get("name"),
                    bound_while_it_did_not_fit=early, hold_s=GANG_HOLD_S)
    assert not early, f"{', '.join(early)} of the gang bound while only 2 of its 3 pods could: partial scheduling"
    cluster.kube.delete(rest.PODS, gang.HOLDER, namespace)
    got = {}
    for name in g.members:
        pod = wait_running(cluster.kube, namespace, name, timeout=120)
        got[name] = [d.device for c in pod_claims(cluster.kube, pod).values() for d in allocated_devices(c)]
    evidence.record(devices_once_it_fit=got)
    assert sorted(d for ds in got.values() for d in ds) == sorted(d.get("name") for d in g.devices), got


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
            cluster.kube.delete(rest.PODS, pod, namespace)
        cluster.kube.delete(rest.DEVICE_CLASSES, cls)


def _container_node(cluster) -> str:
    if cluster.profile.container_view != "env":
        pytest.skip(f"the {cluster.profile.name} profile's containers are checked with NVML (suites/test_gpu_visibility.py)")
    nodes = cluster.container_nodes()
    if not nodes:
        pytest.skip("containers do not run on simulated (KWOK) nodes, so there is no in-container view to compare")
    return nodes[0]


@pytest.mark.requires(needs.pullable_image)
def test_an_init_container_and_a_regular_container_share_one_gpu(cluster, namespace, evidence):
    """Upstream: "should share 1 GPU between init container and regular container"."""
    node = _container_node(cluster)
    cluster.template(namespace, "gpu")
    body = probe_pod("init-and-main", cluster.run_id, cluster.probe_image, node, {"gpu": {"template": "gpu"}})
    init = {**body["spec"]["containers"][0], "name": "init", "command": ["sh", "-c", PRINT_ENV]}
    body["spec"]["initContainers"] = [init]
    cluster.kube.create(rest.PODS, body, namespace)
    wait_running(cluster.kube, namespace, "init-and-main", timeout=120)
    views = {c: devices_seen(read_env(cluster.kube, namespace, "init-and-main", c)) for c in ("init", "ctr0")}
    claim = pod_claims(cluster.kube, cluster.kube.get(rest.PODS, "init-and-main", namespace))["gpu"]
    allocated = {d.device for d in allocated_devices(claim)}
    evidence.record(node=node, views={c: sorted(v) for c, v in views.items()}, allocated=sorted(allocated))
    for container, seen in views.items():
        why = mismatch(seen, allocated)
        assert why is None, f"{container}: {why}"


@pytest.mark.requires(needs.pullable_image)
def test_an_admin_access_claim_reaches_a_device_another_pod_holds_and_says_so_in_the_container(cluster, namespace, evidence):
    """Upstream: "should have DRA_ADMIN_ACCESS set to true"; and the admin claim does not need the device free."""
    node = _container_node(cluster)
    try:
        cluster.kube.patch(rest.NAMESPACES, namespace, {"metadata": {"labels": {admin_access.LABEL: "true"}}})
    except rest.ApiError as e:
        if e.status != 403:
            raise
        raise NotEstablished(f"admin access needs the namespace labelled {admin_access.LABEL}=true, which this identity may not do: {e.message}") from None
    only = [f"{cluster.profile.cel_attribute('index')} == {_free_index(cluster, node)}"]
    cluster.claim(namespace, "user", cluster.request(selectors=only))
    cluster.kube.create(rest.PODS, probe_pod("user", cluster.run_id, cluster.probe_image, node, {"gpu": {"claim": "user"}}), namespace)
    wait_running(cluster.kube, namespace, "user", timeout=120)
    cluster.claim(namespace, "admin", cluster.request(selectors=only, admin_access=True))
    cluster.kube.create(rest.PODS, probe_pod("admin", cluster.run_id, cluster.probe_image, node, {"gpu": {"claim": "admin"}}), namespace)
    wait_running(cluster.kube, namespace, "admin", timeout=120)
    envs = {p: read_env(cluster.kube, namespace, p, "ctr0") for p in ("user", "admin")}
    held = {p: [d.device for d in allocated_devices(cluster.kube.get(rest.RESOURCE_CLAIMS, p, namespace))] for p in envs}
    evidence.record(node=node, devices=held, dra_admin_access={p: e.get("DRA_ADMIN_ACCESS") for p, e in envs.items()})
    assert held["admin"] == held["user"], f"the admin claim got {held['admin']}, the device in use is {held['user']}"
    assert envs["admin"].get("DRA_ADMIN_ACCESS") == "true", envs["admin"]
    assert envs["user"].get("DRA_ADMIN_ACCESS") == "false", envs["user"]


def _free_index(cluster, node: str) -> int:
    """The lowest index of a device on ``node`` that nobody holds: on a shared cluster a tenant may hold index 0."""
    free = sorted(i for d in cluster.free_devices(node).get(node, [])
                  if isinstance(i := cluster.profile.device_attribute(d, "index"), int))
    if not free:
        raise NotEstablished(f"no device on {node} is free for the claim the admin claim must share")
    return free[0]


@pytest.fixture
def driver_webhook(cluster, namespace) -> Iterator[str]:
    """The driver's validating webhook, registered for this test's namespace only, until the test ends."""
    try:
        name = cluster.provider.start_driver_webhook(namespace, cluster.run_id)
    except NotImplementedError:
        pytest.skip("the driver's installation decides whether its webhook runs (chart: webhook.enabled, with "
                    "cert-manager); the harness runs it only where it runs the driver")
    except ClusterError as e:
        pytest.skip(str(e))
    yield name
    cluster.provider.stop_driver_webhook(name)


@pytest.mark.parametrize(("kind", "version"), [("ResourceClaim", "v1"), ("ResourceClaim", "v1beta1"),
                                               ("ResourceClaimTemplate", "v1")])
def test_the_drivers_webhook_refuses_an_invalid_opaque_config_before_any_pod_waits_on_it(
        cluster, namespace, driver_webhook, evidence, kind, version):
    """Upstream: "should reject invalid v1 ResourceClaim", "... v1beta1 ResourceClaim", "... v1 ResourceClaimTemplate".

    Beyond upstream, the same object with a valid interval is admitted: the webhook refuses the config, not the kind.
    """
    if version != "v1" and rest.served(cluster.kube, "resource.k8s.io", "resourceclaims", "ResourceClaim", (version,),
                                       namespaced=True) is None:
        pytest.skip(f"Kubernetes {cluster.server_version()} does not serve resource.k8s.io/{version}")
    api = cluster.profile.sharing_config.get("apiVersion", "gpu.resource.example.com/v1alpha1")
    res, bad = config_webhook.config_object(kind, version, cluster.device_class, cluster.driver, "InvalidInterval", api)
    refused = config_webhook.refusal(cluster.kube, res, bad, namespace)
    _, good = config_webhook.config_object(kind, version, cluster.device_class, cluster.driver, "Long", api)
    admitted = config_webhook.refusal(cluster.kube, res, good, namespace)
    evidence.record(object=f"{kind} resource.k8s.io/{version}", webhook=driver_webhook, invalid_refused=refused,
                    valid_refused=admitted)
    assert refused is not None, f"a {kind} ({version}) with time-slice interval InvalidInterval was admitted"
    if config_webhook.GATE_OFF.search(refused):  # the driver offers no time-slicing here, so no interval to check
        raise NotEstablished(f"the driver's webhook refuses every time-slicing config: {refused}")
    assert config_webhook.REFUSAL in refused, refused
    assert admitted is None, f"the same {kind} with interval Long was refused too: {admitted}"
