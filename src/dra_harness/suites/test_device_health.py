"""Device health: a device the driver reports unhealthy in its own slice, and what the pod is told.

Drivers for real GPUs now report faults (NVIDIA's XID errors, say) as taints on the device in
their ResourceSlice (``devices[].taints``, DRADeviceTaints); the example driver reports none, so
the harness publishes the slices of a simulated node (:mod:`dra_harness.topology.fleet`) and
taints a device there the way such a driver would:

- NoExecute on a device a pod holds: kube-controller-manager deletes the pod (DisruptionTarget,
  DeletionByDeviceTaintManager), timed; a pod on another device of the node keeps running;
- NoSchedule: new claims stay off that device (a 2-GPU claim on a 2-GPU node waits, a 1-GPU
  claim gets the healthy one).

On a real node, where the version has ResourceHealthStatus (beta, on by default, in 1.36), the
kubelet reports each claimed device's health in ``status.containerStatuses[].allocatedResourcesStatus``;
the check asserts the claim is listed there (``claim:<name>``, each CDI device the driver named with a
health value) and records it. A driver that serves no DRA health service leaves every device
``Unknown`` (the example driver v0.4.0 does): then the check is "not established", not passed.
Negative control: a taint on a device the pod does not hold evicts nothing
(``tests/integration/test_device_health_controls.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dra_harness.checks import needs
from dra_harness.checks.incontainer import probe_pod
from dra_harness.kube import rest
from dra_harness.kube.pods import allocated_devices, pod_claims, wait_evicted, wait_running, wait_unschedulable
from dra_harness.kube.waits import WaitError, watch_until
from dra_harness.plugin.simulated import on_simulated_nodes
from dra_harness.topology.fleet import TopologyFleet

pytestmark = [pytest.mark.concern("device-health", "Device health"), pytest.mark.exclusive]  # simulated nodes must not meet other suites' node audits
HEALTH_KEY = "dra-harness.io/unhealthy"


@pytest.fixture
def fleet(request: pytest.FixtureRequest, cluster, run_id: str) -> Iterator[TopologyFleet]:
    fl = TopologyFleet(cluster.kube, run_id, gpus=2)
    with on_simulated_nodes(request.config, cluster, fl, "the device health suite"):
        yield fl


def taint(fleet: TopologyFleet, gpu: int, effect: str) -> None:
    """Taint ``gpu`` in its slice; skips where the API server drops slice taints (DRADeviceTaints off)."""
    published = fleet.taint(gpu, effect, HEALTH_KEY, "xid-79")
    if not published["spec"]["devices"][gpu].get("taints"):
        pytest.skip("the API server dropped devices[].taints from the slice: DRADeviceTaints is off in this version")


def run_on(cluster, fleet: TopologyFleet, namespace: str, name: str, count: int = 1) -> dict:
    cluster.kube.create(rest.RESOURCE_CLAIM_TEMPLATES, fleet.claim_template(name, count, ()), namespace)
    cluster.kube.create(rest.PODS, fleet.pod(name, name), namespace)
    return wait_running(cluster.kube, namespace, name, timeout=60)


def test_a_noexecute_taint_the_driver_publishes_evicts_the_pod_holding_that_device(cluster, fleet, namespace, evidence):
    kube = cluster.kube
    pods = {name: run_on(cluster, fleet, namespace, name) for name in ("victim", "bystander")}
    held = {n: allocated_devices(pod_claims(kube, p)["gpu"])[0].device for n, p in pods.items()}
    gpu = int(held["victim"].rsplit("-", 1)[1])
    took, cond = wait_evicted(kube, namespace, "victim", 60, cause=lambda: taint(fleet, gpu, "NoExecute"))
    evidence.record(section="device-health", node=fleet.node, tainted=held["victim"], evicted_after_s=round(took, 3) if took else None, condition=cond)
    assert took is not None, f"the pod holding {held['victim']} still runs 60 s after the driver reported it unhealthy"
    assert (cond or {}).get("reason") == "DeletionByDeviceTaintManager", cond
    assert kube.get(rest.PODS, "bystander", namespace)["status"]["phase"] == "Running", "the pod on the healthy device was hit too"


def test_a_noschedule_taint_the_driver_publishes_keeps_new_claims_off_that_device(cluster, fleet, namespace, evidence):
    taint(fleet, 0, "NoSchedule")
    cluster.kube.create(rest.RESOURCE_CLAIM_TEMPLATES, fleet.claim_template("both", 2, ()), namespace)
    cluster.kube.create(rest.PODS, fleet.pod("both", "both"), namespace)
    wait_unschedulable(cluster.kube, namespace, "both", timeout=60)
    one = run_on(cluster, fleet, namespace, "one")
    got = [d.device for d in allocated_devices(pod_claims(cluster.kube, one)["gpu"])]
    evidence.record(section="device-health", node=fleet.node, tainted="gpu-0", one_gpu_claim_got=got)
    assert got == ["gpu-1"], f"a new claim got {got} although gpu-0 is reported unhealthy"


@pytest.mark.requires(needs.pullable_image)
def test_a_real_nodes_kubelet_reports_the_health_of_each_claimed_device_to_the_pod(cluster, namespace, evidence):
    nodes = cluster.container_nodes()
    if not nodes:
        pytest.skip("no node runs a kubelet (simulated nodes only): allocatedResourcesStatus is the kubelet's")
    cluster.template(namespace, "one", cluster.request())
    cluster.kube.create(rest.PODS, probe_pod("health", cluster.run_id, cluster.probe_image, nodes[0],
                                             {"gpu": {"template": "one"}}), namespace)
    wait_running(cluster.kube, namespace, "health", timeout=120)

    def reported(p: dict) -> dict[str, dict[str, str]]:
        """``claim:<name>`` -> {resourceID (the CDI device the driver named): health}, over the pod's containers."""
        return {s["name"]: {r["resourceID"]: r.get("health", "") for r in s.get("resources") or []}
                for c in p["status"].get("containerStatuses") or [] for s in c.get("allocatedResourcesStatus") or []}

    try:
        pod = watch_until(cluster.kube, rest.PODS, lambda ps: bool(ps) and bool(reported(ps[0]).get("claim:gpu")), 30,
                          "the kubelet to report the health of the pod's claimed devices", namespace=namespace,
                          field_selector="metadata.name=health")[0]
    except WaitError:
        version = cluster.server_version()
        if version.startswith(("v1.35", "v1.34")):
            pytest.skip(f"Kubernetes {version}: ResourceHealthStatus is alpha and off by default before 1.36")
        raise
    health = reported(pod)["claim:gpu"]
    evidence.record(section="device-health", node=nodes[0], claim="gpu", health=health,
                    **({"not_established": "the driver reports no device health (every device Unknown): the example driver "
                                           "serves no DRA health service, so a fault would not reach the pod this way"}
                       if set(health.values()) == {"Unknown"} else {}))
    assert all(h in ("Healthy", "Unhealthy", "Unknown") for h in health.values()), health
