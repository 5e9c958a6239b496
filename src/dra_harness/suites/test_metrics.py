"""Metrics that must move: the DRA series operators watch rise when DRA work happens.

With no other test running (``exclusive``: another test's claims would move them too), a
snapshot of the components' ``/metrics`` is taken, pods with template claims are scheduled
(and one whose claim cannot be met), and a second snapshot must show (:mod:`dra_harness.checks.metrics`):

- kube-scheduler: the DynamicResources plugin evaluated at PreFilter and Filter for each pod;
  the pod it could not place counted in ``scheduler_unschedulable_pods{plugin="DynamicResources"}``
  and in the unschedulable queue of ``scheduler_pending_pods``;
- kube-controller-manager: a ResourceClaim created from a template per pod, and allocated claims counted;
- the scheduler's DynamicResources time per call at each extension point it sampled, recorded as
  ``scheduler_dra_<point>_mean_s`` timings (in the report's measurements and compared by ``diff``);
- each kubelet that prepared a claim (real nodes only, read through the API server's node proxy):
  ``dra_operations_duration_seconds{operation_name="PrepareResources"}``, the driver's
  ``NodePrepareResources`` gRPC calls, and ``dra_resource_claims_in_use`` for the driver.

Where a component's ``/metrics`` cannot be read (the scheduler and controller manager of a
cluster the run did not create) the check says so and skips; a series the version does not
serve is a failure naming it. Negative control: pods without claims move none of them
(``tests/integration/test_metrics_controls.py``).
"""

from __future__ import annotations

import logging
import time

import pytest

from dra_harness.errors import NotEstablished
from dra_harness.checks import needs
from dra_harness.checks import metrics
from dra_harness.checks.incontainer import probe_pod
from dra_harness.kube import rest
from dra_harness.kube.pods import claim_names, wait_running, wait_unschedulable
from dra_harness.retrying import NotYet, until

pytestmark = [pytest.mark.concern("metrics", "Metrics"), pytest.mark.exclusive]
log = logging.getLogger(__name__)
PODS = 3
S, E = metrics.series, metrics.expect


def control_plane() -> dict[str, list[metrics.Expect]]:
    """Each pod is evaluated by the DynamicResources plugin and gets a claim from its template (the one it
    cannot place too); each running pod's claim is allocated; the pending one is counted as unschedulable."""
    return {
        "kube-scheduler": [
            E(S("scheduler_plugin_evaluation_total", plugin="DynamicResources", extension_point="PreFilter"), rise=PODS + 1),
            E(S("scheduler_plugin_evaluation_total", plugin="DynamicResources", extension_point="Filter"), rise=PODS + 1),
            E(S("scheduler_unschedulable_pods", plugin="DynamicResources")),
            E(S("scheduler_pending_pods", queue="unschedulable"))],
        # The claim controller's series were renamed in 1.37 (resourceclaim_controller_* before).
        "kube-controller-manager": [
            E(S("dynamic_resource_allocation_resourceclaim_creates_total", status="success"),
              S("resourceclaim_controller_creates_total", status="success"), rise=PODS + 1),
            E(S("dynamic_resource_allocation_resource_claims", allocated="true"),
              S("resourceclaim_controller_resource_claims", allocated="true"), rise=PODS)],
    }


def kubelet(driver: str) -> list[metrics.Expect]:
    return [E(S("dra_operations_duration_seconds_count", operation_name="PrepareResources")),
            E(S("dra_grpc_operations_duration_seconds_count", driver_name=driver,
                method_name="/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources")),
            E(S("dra_resource_claims_in_use", driver_name=driver))]


def _sources(cluster) -> dict:
    found = cluster.provider.fingerprint_sources()
    return {} if isinstance(found, str) else found[1]


def test_the_schedulers_and_claim_controllers_dra_metrics_move_with_claims_and_pods(cluster, namespace, evidence):
    sources = _sources(cluster)
    missing = [c for c in ("kube-scheduler", "kube-controller-manager") if c not in sources]
    if missing:
        raise NotEstablished(f"the /metrics of {', '.join(missing)} cannot be read on this cluster (only the API "
                             "server's is reachable through the API)")
    expected = control_plane()
    before = {c: sources[c]() for c in expected}
    cluster.template(namespace, "one", cluster.request())
    cluster.template(namespace, "too-many", cluster.request(count=max(cluster.expected.nodes.values()) + 1))
    for i in range(PODS):
        cluster.pod(namespace, f"p{i}", template="one")
    cluster.pod(namespace, "never", template="too-many")
    for i in range(PODS):
        wait_running(cluster.kube, namespace, f"p{i}", timeout=60)
    wait_unschedulable(cluster.kube, namespace, "never", timeout=60)
    found = metrics.settle(sources, expected, before)
    # The DynamicResources plugin's mean time per call at each point: timings the diff gate compares between runs.
    means = metrics.plugin_means(before["kube-scheduler"], sources["kube-scheduler"]())
    evidence.record(section="metrics", **{c: {"moved": m.moved, "still": m.still, "absent": m.absent} for c, m in found.items()},
                    **{f"scheduler_dra_{point.lower()}_mean_s": round(v, 6) for point, v in sorted(means.items())})
    problems = [f"{c}: {p}" for c, m in found.items() for p in m.problems()]
    assert not problems, problems


@pytest.mark.requires(needs.pullable_image)
def test_each_kubelet_that_prepared_a_claim_counts_it_in_its_dra_metrics(cluster, namespace, evidence):
    nodes = cluster.container_nodes()
    if not nodes:
        pytest.skip("no node runs a kubelet (simulated nodes only): the kubelet's DRA metrics exist only on real nodes")
    node = nodes[0]

    def read() -> str:
        try:
            return cluster.kube.raw(f"/api/v1/nodes/{node}/proxy/metrics", timeout=20)
        except rest.ApiError as e:
            raise NotEstablished(f"the kubelet's /metrics on {node} cannot be read through the API server: "
                                 f"{e.status} {e.message[:150]}") from None

    before = _settled(read, cluster.kube, node, cluster.driver)
    cluster.template(namespace, "one", cluster.request())
    cluster.kube.create(rest.PODS, probe_pod("kubelet-metrics", cluster.run_id, cluster.probe_image, node,
                                             {"gpu": {"template": "one"}}), namespace)
    wait_running(cluster.kube, namespace, "kubelet-metrics", timeout=120)
    moved = metrics.settle({"kubelet": read}, {"kubelet": kubelet(cluster.driver)}, {"kubelet": before})["kubelet"]
    evidence.record(section="metrics", node=node, moved=moved.moved, still=moved.still, absent=moved.absent)
    assert not moved.problems(), moved.problems()


def _settled(read, kube: rest.Kube, node: str, driver: str, timeout: float = 60.0) -> str:
    """The kubelet's metrics once its claims-in-use gauge agrees with the API: an earlier test's claim
    the kubelet has not unprepared yet would drop out while ours comes in, and the gauge would not move
    (seen once in a main job: 1 before, 1 after)."""
    gauge = metrics.series("dra_resource_claims_in_use", driver_name=driver)
    text = ""

    def agrees() -> None:
        nonlocal text
        text = read()
        counted = metrics.read(text, [gauge]).get(metrics.key(gauge), 0.0)
        held = _claims_held_on(kube, node, driver)
        if counted != len(held):
            raise NotYet(f"the kubelet on {node} counts {counted:g} claims of {driver} in use; the API shows "
                         f"{len(held)} held by pods there ({', '.join(sorted(held)) or 'none'})")

    until(time.monotonic() + timeout, 1.0, log, "the kubelet's claims-in-use gauge")(agrees)
    return text


def _claims_held_on(kube: rest.Kube, node: str, driver: str) -> set[str]:
    """``namespace/claim`` of each claim with a device of ``driver`` that a pod on ``node`` holds (not yet terminated)."""
    held: set[str] = set()
    for pod in kube.list(rest.PODS, field_selector=f"spec.nodeName={node}"):
        if pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        ns = pod["metadata"]["namespace"]
        for name in set(claim_names(pod).values()):
            try:
                claim = kube.get(rest.RESOURCE_CLAIMS, name, ns)
            except rest.ApiError:
                continue  # gone: the kubelet will drop it too
            results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
            if any(r.get("driver") == driver for r in results):
                held.add(f"{ns}/{name}")
    return held
