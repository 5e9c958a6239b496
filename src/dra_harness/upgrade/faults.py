"""Faults injected between two upgrade steps, so that each invariant is seen to catch what it guards.

These are the negative controls of ``dra-harness upgrade --inject``: a container killed on a real
node (the kubelet restarts it: new container ID, restart count 1) and a claim replaced under the
same name (new uid; its pod recreated). A run with a fault must exit 1 naming it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from dra_harness.errors import ClusterError, InputError
from dra_harness.kube import builders, rest
from dra_harness.kube.pods import pod_claims, wait_running
from dra_harness.kube.rest import Kube
from dra_harness.kube.waits import wait_for_deletion, wait_for_object
from dra_harness.providers.embedded import realcluster
from dra_harness.providers.embedded.cluster import LocalCluster
from dra_harness.upgrade.workloads import GPU_CONFIG, RUNNING_DEADLINE_S, Workloads, request

FAULTS = {
    "container-restart": "kill the first container of a pod on a real node (the kubelet restarts it)",
    "claim-replaced": "delete the configured claim and its pod, and create both again under the same names",
    "cdi-removed": "remove the CDI spec the driver wrote for a claim on a real node (what a reboot does to /var/run)",
    "driver-gone-at-unprepare": "stop the real node's driver while the unprepare check ends a pod (started again after)",
}
NEEDS_REAL_NODE = ("container-restart", "cdi-removed", "driver-gone-at-unprepare")
#: Faults caused at the unprepare check rather than after the first step.
AT_UNPREPARE = ("driver-gone-at-unprepare",)


@contextmanager
def at_unprepare(names: tuple[str, ...], cluster: LocalCluster, node: str, done: list[str]) -> Iterator[None]:
    """Around the unprepare check: with ``driver-gone-at-unprepare``, ``node``'s driver is stopped for
    it and started again after (what was done is appended to ``done``)."""
    if "driver-gone-at-unprepare" not in names:
        yield
        return
    cluster.stop_driver(node)
    done.append(f"stopped the driver on {node} before ending the pod")
    try:
        yield
    finally:
        cluster.start_driver(node)


def check(names: tuple[str, ...], real_nodes: int, driver_daemonset: bool = False) -> None:
    for name in names:
        if name not in FAULTS:
            raise InputError(f"--inject {name}: unknown fault; choose one of {', '.join(FAULTS)}")
        if name in NEEDS_REAL_NODE and not real_nodes:
            raise InputError(f"--inject {name} needs a real node (--real-nodes 1): simulated pods run no container")
        if name in AT_UNPREPARE and driver_daemonset:
            raise InputError(f"--inject {name} stops the real node's driver process; under --driver-daemonset "
                             "its driver is a DaemonSet's pod, which its kubelet would start again")


def inject(name: str, cluster: LocalCluster, kube: Kube, w: Workloads) -> str:
    """Cause fault ``name`` and wait until the cluster shows it; returns what was done."""
    if name == "container-restart":
        return _restart_container(cluster, kube, w)
    if name == "cdi-removed":
        return _remove_cdi_spec(cluster, kube, w)
    return _replace_claim(kube, w)


def _remove_cdi_spec(cluster: LocalCluster, kube: Kube, w: Workloads) -> str:
    pod = kube.get(rest.PODS, w.real_pods[0], w.namespace)
    node = pod["spec"]["nodeName"]
    claim = pod_claims(kube, pod)["gpu"]
    uid, name = claim["metadata"]["uid"], claim["metadata"]["name"]
    specs = [f for f in cluster.driver_dirs(node)["cdi"].glob("*") if uid in f.name]
    if not specs:
        raise ClusterError(f"no CDI spec naming claim {uid} on {node}: {sorted(f.name for f in cluster.driver_dirs(node)['cdi'].glob('*'))}")
    specs[0].unlink()
    return f"removed {specs[0].name} on {node} (claim {w.namespace}/{name})"


def _restart_container(cluster: LocalCluster, kube: Kube, w: Workloads) -> str:
    pod = kube.get(rest.PODS, w.real_pods[0], w.namespace)
    status = pod["status"]["containerStatuses"][0]
    container_id = status["containerID"].split("://", 1)[1]
    st = cluster.state()
    if st is None:
        raise ClusterError(f"cluster {cluster.name!r} is not up")
    rn = realcluster.node(cluster, pod["spec"]["nodeName"])
    out = rn.ctr(st.binaries["ctr"], "tasks", "kill", "--signal", "SIGKILL", container_id, timeout=30)
    if out.returncode != 0:
        raise ClusterError(f"ctr tasks kill {container_id}: {out.stderr.strip()}")
    wait_for_object(kube, rest.PODS, pod["metadata"]["name"],
                    lambda p: any(c.get("restartCount", 0) > status.get("restartCount", 0) and "running" in (c.get("state") or {})
                                  for c in p["status"].get("containerStatuses") or []),
                    RUNNING_DEADLINE_S, "the killed container to be restarted", namespace=w.namespace)
    return f"killed container {container_id[:12]} of {w.namespace}/{pod['metadata']['name']} on {pod['spec']['nodeName']}"


def _replace_claim(kube: Kube, w: Workloads) -> str:
    before = kube.get(rest.RESOURCE_CLAIMS, "configured", w.namespace)["metadata"]["uid"]
    kube.delete(rest.PODS, "configured-0", w.namespace, grace_seconds=0)
    wait_for_deletion(kube, rest.PODS, "configured-0", RUNNING_DEADLINE_S, w.namespace)
    kube.delete(rest.RESOURCE_CLAIMS, "configured", w.namespace)
    wait_for_deletion(kube, rest.RESOURCE_CLAIMS, "configured", RUNNING_DEADLINE_S, w.namespace)
    kube.create(rest.RESOURCE_CLAIMS, builders.claim("configured", w.run_id, [request()], config=GPU_CONFIG), w.namespace)
    kube.create(rest.PODS, builders.pod("configured-0", w.run_id, claims={"gpu": {"claim": "configured"}}), w.namespace)
    wait_running(kube, w.namespace, "configured-0", RUNNING_DEADLINE_S)
    after = kube.get(rest.RESOURCE_CLAIMS, "configured", w.namespace)["metadata"]["uid"]
    return f"replaced claim {w.namespace}/configured (uid {before} -> {after}) and its pod"
