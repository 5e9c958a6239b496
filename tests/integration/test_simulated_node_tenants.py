"""Tenants' tolerate-all pods meet a run's simulated nodes: none is faked running, and what their owners see.

The embedded cluster plays a shared cluster whose two nodes run a tenant's two tolerate-all
DaemonSets, as kube-proxy, CNI agents and log shippers are: ``log-shipper`` selects no node,
``node-agent`` selects ``kubernetes.io/os=linux`` (as most system DaemonSets do). The run adds a
simulated node as it does on a cluster it did not build (a topology fleet's node, run by a local
KWOK of the run's own), and a tenant's tolerate-all Job is placed on it by the scheduler.

With the run's stages no tenant pod there is ever Running, Ready or Succeeded: each is Failed at
once with :data:`~dra_harness.providers.kwok_stages.FOREIGN_REASON`. ``node-agent`` puts no pod
there and rolls out as before; ``log-shipper`` gets a pod there that never becomes available, so
its status counts one pod more than is available and its rolling update stalls until the node is
gone: what the preflight (:mod:`dra_harness.providers.node_guard`), which names it and not
``node-agent``, refuses to cause. Negative control: KWOK with the shipped stages (those before this
change, which the embedded cluster's own KWOK still plays) marks the tenant's DaemonSet pod Ready
and its Job Succeeded, though nothing ran. With only deploy/rbac's roles, the run's KWOK may not
write a tenant's pod status: the pod stays Pending there, never faked.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from dra_harness.contention.scenario import load
from dra_harness.contention.topology import Topology
from dra_harness.errors import Refused
from dra_harness.kube import rest
from dra_harness.kube.waits import WaitTimeout, wait_for_object, watch_until
from dra_harness.providers import kwok_stages, node_guard
from dra_harness.providers.embedded import twin
from dra_harness.providers.embedded.cluster import ClusterSpec, LocalCluster
from dra_harness.providers.simulated_nodes import LocalKwok
from dra_harness.topology.fleet import TopologyFleet

pytestmark = pytest.mark.cluster
SMALL = Path(__file__).resolve().parents[2] / "suites" / "contention-small.yaml"
TENANT = "tenant-a"
PAUSE = "registry.k8s.io/pause:3.10"
ALL = [{"operator": "Exists"}]
#: How long the stalled rollout is watched: the DaemonSet controller acts within a second of a change.
STALL_WINDOW_S = 8.0


def _daemonset(name: str, node_selector: dict[str, str] | None = None) -> dict:
    spec: dict = {"tolerations": ALL, "terminationGracePeriodSeconds": 5, "containers": [{"name": "c", "image": PAUSE}]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": name}},
                                                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def _rolled_out(ds: dict) -> bool:
    st = ds.get("status", {})
    return (st.get("observedGeneration") == ds["metadata"]["generation"]
            and st.get("desiredNumberScheduled") == st.get("updatedNumberScheduled") == st.get("numberAvailable"))


def _counts(ds: dict) -> str:
    st = ds.get("status", {})
    return (f"desired {st.get('desiredNumberScheduled')}, updated {st.get('updatedNumberScheduled', 0)}, "
            f"available {st.get('numberAvailable', 0)}")


@pytest.fixture(scope="module")
def shared(binaries):
    """A cluster of two nodes with the tenant's two DaemonSets rolled out on both."""
    started = time.monotonic()
    name = f"it-tenants-{uuid.uuid4().hex[:6]}"
    cluster = LocalCluster(name)
    cluster.up(ClusterSpec(name=name, nodes=2, gpus_per_node=1, owner_pid=os.getpid()))
    try:
        kube = cluster.kube()
        kube.create(rest.NAMESPACES, {"metadata": {"name": TENANT}})
        kube.create(rest.DAEMON_SETS, _daemonset("log-shipper"), TENANT)
        kube.create(rest.DAEMON_SETS, _daemonset("node-agent", {"kubernetes.io/os": "linux"}), TENANT)
        for ds in ("log-shipper", "node-agent"):
            wait_for_object(kube, rest.DAEMON_SETS, ds, lambda d: _rolled_out(d) and d["status"]["numberAvailable"] == 2,
                            60, f"{ds} on both nodes", TENANT)
        print(f"cluster and tenant DaemonSets up in {time.monotonic() - started:.1f}s")
        yield cluster
    finally:
        cluster.down()


def _on_simulated_nodes(cluster: LocalCluster, run_id: str, stages=None):
    kube = cluster.kube()
    fleet = TopologyFleet(kube, run_id, gpus=1)
    kwok = LocalKwok(str(cluster.kubeconfig), fleet.tag, run_id, stages=stages).start()
    fleet.kwok = kwok.annotation
    fleet.create(timeout=30)
    return fleet, kwok


def _job(kube, name: str, node: str) -> None:
    """A tenant's tolerate-all Job, placed by the scheduler on ``node`` (required affinity, as any tenant may write)."""
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    kube.create(rest.JOBS, {"metadata": {"name": name}, "spec": {"backoffLimit": 0, "template": {"spec": {
        "restartPolicy": "Never", "tolerations": ALL, "affinity": affinity,
        "containers": [{"name": "c", "image": PAUSE}]}}}}, TENANT)


def _tear_down(cluster: LocalCluster, fleet: TopologyFleet, kwok: LocalKwok, job: str) -> None:
    kube = cluster.kube()
    kube.delete(rest.JOBS, job, TENANT, propagation="Background")
    fleet.delete()
    kwok.stop()


def test_negative_control_the_shipped_stages_fake_a_tenants_daemonset_pod_ready_and_its_job_succeeded(shared):
    started = time.monotonic()
    kube = shared.kube()
    fleet, kwok = _on_simulated_nodes(shared, f"ctl{uuid.uuid4().hex[:5]}", stages=kwok_stages.SHIPPED)
    try:
        _job(kube, "batch-control", fleet.node)
        pods = watch_until(kube, rest.PODS, lambda ps: any(_ready(p) for p in ps), 30,
                           "the tenant's DaemonSet pod on the simulated node faked Ready", namespace=TENANT,
                           field_selector=f"spec.nodeName={fleet.node}", label_selector="app=log-shipper")
        assert any(p["status"].get("podIP") for p in pods), "a faked pod has an address that leads nowhere"
        wait_for_object(kube, rest.JOBS, "batch-control", lambda j: (j.get("status", {}).get("succeeded") or 0) >= 1,
                        30, "the tenant's Job faked Succeeded", TENANT)
    finally:
        _tear_down(shared, fleet, kwok, "batch-control")
    print(f"negative control: {time.monotonic() - started:.1f}s")


def _ready(pod: dict) -> bool:
    return pod.get("status", {}).get("phase") == "Running" or any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in pod.get("status", {}).get("conditions") or [])


def test_a_runs_kwok_fails_tenants_pods_at_once_and_the_preflight_names_the_daemonset_that_would_stall(shared):
    started = time.monotonic()
    kube = shared.kube()
    run_id = f"run{uuid.uuid4().hex[:5]}"
    probe = TopologyFleet(kube, run_id, gpus=1)
    with pytest.raises(Refused) as refused:
        node_guard.check(kube, probe.node_bodies(), run_id)
    assert f"DaemonSet {TENANT}/log-shipper" in str(refused.value) and "node-agent" not in str(refused.value)

    fleet, kwok = _on_simulated_nodes(shared, run_id)  # added anyway, to see what the refusal spares a tenant
    seen: dict[str, set[str]] = {}  # pod -> every phase (and "Ready") it was seen in

    def record(pods: list[dict]) -> bool:
        for p in pods:
            states = seen.setdefault(f"{p['metadata']['name']} ({p['metadata']['uid'][:8]})", set())
            states.add(p.get("status", {}).get("phase") or "none")
            if p.get("status", {}).get("reason"):
                states.add(p["status"]["reason"])
            if _ready(p):
                states.add("Ready")
        return False

    try:
        _job(kube, "batch", fleet.node)
        job = wait_for_object(kube, rest.JOBS, "batch", lambda j: (j.get("status", {}).get("failed") or 0) >= 1,
                              30, "the tenant's Job to see its pod fail", TENANT)
        assert not job["status"].get("succeeded"), job["status"]
        failed_at = time.monotonic()
        # Both DaemonSets' templates change, as an upgrade does; follow the pods on the simulated node meanwhile.
        for ds in ("log-shipper", "node-agent"):
            kube.patch(rest.DAEMON_SETS, ds, {"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}}, TENANT)
        agent = wait_for_object(kube, rest.DAEMON_SETS, "node-agent", _rolled_out, 30, "node-agent's rollout", TENANT)
        agent_s = time.monotonic() - failed_at
        try:
            watch_until(kube, rest.PODS, record, STALL_WINDOW_S, "the window to end", namespace=TENANT,
                        field_selector=f"spec.nodeName={fleet.node}", environment=False)
        except WaitTimeout:  # the window ending is the point
            pass
        shipper = kube.get(rest.DAEMON_SETS, "log-shipper", TENANT)
        generation = str(shipper["metadata"]["generation"])
        replaced = [p["spec"]["nodeName"] for p in kube.list(rest.PODS, TENANT, label_selector="app=log-shipper")
                    if p["spec"].get("nodeName") != fleet.node
                    and p["metadata"]["labels"].get("pod-template-generation") == generation]
    finally:
        _tear_down(shared, fleet, kwok, "batch")
    print(f"node-agent rolled out in {agent_s:.1f}s ({_counts(agent)}); log-shipper after {STALL_WINDOW_S:.0f}s: "
          f"{_counts(shipper)}; tenant pods seen on the simulated node: {seen}")
    assert seen, "no tenant pod was seen on the simulated node"
    assert not any({"Running", "Ready", "Succeeded"} & states for states in seen.values()), seen
    # Each failed at once, saying why; one the DaemonSet controller has just made again may still be Pending.
    assert any(kwok_stages.FOREIGN_REASON in states for states in seen.values()), seen
    assert all(kwok_stages.FOREIGN_REASON in states or states == {"Pending"} for states in seen.values()), seen
    assert agent["status"]["desiredNumberScheduled"] == 2, "node-agent selects linux nodes: none on the simulated node"
    # What the refusal spares a tenant: a pod per simulated node that is never available stalls its rollout.
    assert shipper["status"]["desiredNumberScheduled"] == 3 and shipper["status"].get("numberAvailable", 0) < 3, _counts(shipper)
    assert not _rolled_out(shipper), _counts(shipper)
    assert replaced == [], f"log-shipper replaced its pods on {replaced} though its simulated node's pod never ran"
    # Once the node is gone it is no longer desired; its pod goes when the pod garbage collector takes it (40 s).
    gone = wait_for_object(kube, rest.DAEMON_SETS, "log-shipper",
                           lambda d: d.get("status", {}).get("desiredNumberScheduled") == 2, 30,
                           "log-shipper to stop counting the simulated node", TENANT)
    print(f"after the node went: log-shipper {_counts(gone)}; test {time.monotonic() - started:.1f}s")


def test_under_least_privilege_a_tenants_pod_on_the_simulated_node_stays_pending_and_is_never_faked(shared, tmp_path):
    """deploy/rbac's roles let a local KWOK write pod status only in the run's own namespaces: it may not mark a
    tenant's pod Failed either, so the pod stays Pending, bound to the simulated node, until the node goes."""
    started = time.monotonic()
    kube = shared.kube()
    sa = twin.serviceaccount_kubeconfig(kube, shared.kubeconfig, tmp_path / "sa-kubeconfig", contention=True,
                                       disruptive=False, driver_namespace=None)
    run_id = f"sa{uuid.uuid4().hex[:6]}"
    topo = Topology(kube, load(SMALL), run_id)  # ctn-* nodes: the names whose Leases the policy lets the run's KWOK write
    kwok = LocalKwok(str(sa), topo.tag, run_id).start()
    topo.kwok = kwok.annotation
    seen: dict[str, set[str]] = {}

    def record(pods: list[dict]) -> bool:
        for p in pods:
            seen.setdefault(p["metadata"]["name"], set()).add(p.get("status", {}).get("phase") or "none")
        return False

    try:
        topo.create(timeout=30)
        _job(kube, "batch-sa", topo.nodes[0])
        try:
            watch_until(kube, rest.PODS, record, STALL_WINDOW_S, "the window to end", namespace=TENANT,
                        field_selector=f"spec.nodeName={topo.nodes[0]}", environment=False)
        except WaitTimeout:
            pass
        job = kube.get(rest.JOBS, "batch-sa", TENANT)
        log = kwok.log_file.read_text(errors="replace") if kwok.log_file else ""
    finally:
        kube.delete(rest.JOBS, "batch-sa", TENANT, propagation="Background")
        topo.delete()
        kwok.stop()
    forbidden = sum("forbidden" in line.lower() for line in log.splitlines())
    print(f"least privilege: tenant pods on the simulated node {seen}; job {job.get('status')}; "
          f"{forbidden} forbidden lines in KWOK's log; {time.monotonic() - started:.1f}s")
    assert any(name.startswith("batch-sa") for name in seen), seen
    assert all(states == {"Pending"} for states in seen.values()), seen
    assert not job["status"].get("succeeded") and not job["status"].get("failed"), job["status"]
