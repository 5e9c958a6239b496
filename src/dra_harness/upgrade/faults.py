"""Faults injected between two upgrade steps, so that each invariant is seen to catch what it guards.

These are the negative controls of ``dra-harness upgrade --inject``, one or more per invariant: a
container killed on a real node (the kubelet restarts it: new container ID, restart count 1), a
claim replaced under the same name (new uid; its pod recreated), a CDI spec removed, the driver gone
while a claim should be unprepared, a DeviceClass selector typo (new claims cannot allocate), and an
object stored in a version the new API server does not serve. A run with a fault must exit 1 naming it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

from dra_harness.errors import ClusterError, InputError
from dra_harness.kube import builders, rest
from dra_harness.kube.pods import pod_claims, wait_running
from dra_harness.kube.rest import Kube
from dra_harness.kube.waits import wait_for_deletion, wait_for_object
from dra_harness.providers.local import LocalClusterApi
from dra_harness.upgrade.workloads import DEVICE_CLASS, GPU_CONFIG, RUNNING_DEADLINE_S, Workloads, request

FAULTS = {
    "container-restart": "kill the first container of a pod on a real node (the kubelet restarts it)",
    "claim-replaced": "delete the configured claim and its pod, and create both again under the same names",
    "cdi-removed": "remove the CDI spec the driver wrote for a claim on a real node (what a reboot does to /var/run)",
    "driver-gone-at-unprepare": "stop the real node's driver while the unprepare check ends a pod (started again after)",
    "class-typo": "give the DeviceClass a selector typo for the last step (no new claim can allocate), then put it back",
    "stored-unserved": "put a ResourceClaim stored as resource.k8s.io/v1alpha2 into etcd while the storage versions are read",
}
NEEDS_REAL_NODE = ("container-restart", "cdi-removed", "driver-gone-at-unprepare")
#: Faults caused at the unprepare check, around the last step, or around the storage read, rather than after the first step.
AT_UNPREPARE = ("driver-gone-at-unprepare",)
AT_LAST_STEP = ("class-typo",)
AT_STORAGE_READ = ("stored-unserved",)
#: How long the last step's probe waits under ``class-typo``: it must fail, and a driver step's probe runs in 0.2 s.
BLOCKED_PROBE_S = 20.0
#: A version no release we build serves (removed in v1.32), so no API server can read the object back.
UNSERVED_VERSION = "resource.k8s.io/v1alpha2"


@contextmanager
def at_unprepare(names: tuple[str, ...], cluster: LocalClusterApi, node: str, done: list[str]) -> Iterator[None]:
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


@contextmanager
def around_last_step(names: tuple[str, ...], kube: Kube, done: list[str]) -> Iterator[float | None]:
    """With ``class-typo``: the DeviceClass's selector names a driver that does not exist for the body
    (yields the probe deadline to use), and is put back after. Otherwise yields None."""
    if "class-typo" not in names:
        yield None
        return
    original = kube.get(rest.DEVICE_CLASSES, DEVICE_CLASS)["spec"]["selectors"]
    typo = [{"cel": {"expression": "device.driver == 'gpu.exmaple.com'"}}]
    kube.patch(rest.DEVICE_CLASSES, DEVICE_CLASS, {"spec": {"selectors": typo}})
    done.append(f"gave DeviceClass {DEVICE_CLASS} the selector {typo[0]['cel']['expression']!r} for the last step")
    try:
        yield BLOCKED_PROBE_S
    finally:
        kube.patch(rest.DEVICE_CLASSES, DEVICE_CLASS, {"spec": {"selectors": original}})


@contextmanager
def around_storage_read(names: tuple[str, ...], cluster: LocalClusterApi, namespace: str, done: list[str]) -> Iterator[None]:
    """With ``stored-unserved``: a ResourceClaim stored in a version the new API server cannot serve is in
    etcd while the body reads the storage versions, and deleted after."""
    if "stored-unserved" not in names:
        yield
        return
    etcd = cluster.etcd()
    key = f"/registry/resourceclaims/{namespace}/stored-unserved"
    etcd.put(key, json.dumps({"apiVersion": UNSERVED_VERSION, "kind": "ResourceClaim",
                              "metadata": {"name": "stored-unserved", "namespace": namespace}, "spec": {}}))
    done.append(f"stored {key} as {UNSERVED_VERSION} in etcd")
    try:
        yield
    finally:
        etcd.delete(key)


def check(names: tuple[str, ...], real_nodes: int, driver_daemonset: bool = False) -> None:
    for name in names:
        if name not in FAULTS:
            raise InputError(f"--inject {name}: unknown fault; choose one of {', '.join(FAULTS)}")
        if name in NEEDS_REAL_NODE and not real_nodes:
            raise InputError(f"--inject {name} needs a real node (--real-nodes 1): simulated pods run no container")
        if name in AT_UNPREPARE and driver_daemonset:
            raise InputError(f"--inject {name} stops the real node's driver process; under --driver-daemonset "
                             "its driver is a DaemonSet's pod, which its kubelet would start again")


def inject(name: str, cluster: LocalClusterApi, kube: Kube, w: Workloads) -> str:
    """Cause fault ``name`` and wait until the cluster shows it; returns what was done."""
    if name == "container-restart":
        return _restart_container(cluster, kube, w)
    if name == "cdi-removed":
        return _remove_cdi_spec(cluster, kube, w)
    return _replace_claim(kube, w)


def _remove_cdi_spec(cluster: LocalClusterApi, kube: Kube, w: Workloads) -> str:
    pod = kube.get(rest.PODS, w.real_pods[0], w.namespace)
    node = pod["spec"]["nodeName"]
    claim = pod_claims(kube, pod)["gpu"]
    uid, name = claim["metadata"]["uid"], claim["metadata"]["name"]
    specs = [f for f in cluster.driver_dirs(node)["cdi"].glob("*") if uid in f.name]
    if not specs:
        raise ClusterError(f"no CDI spec naming claim {uid} on {node}: {sorted(f.name for f in cluster.driver_dirs(node)['cdi'].glob('*'))}")
    specs[0].unlink()
    return f"removed {specs[0].name} on {node} (claim {w.namespace}/{name})"


def _restart_container(cluster: LocalClusterApi, kube: Kube, w: Workloads) -> str:
    pod = kube.get(rest.PODS, w.real_pods[0], w.namespace)
    status = pod["status"]["containerStatuses"][0]
    container_id = status["containerID"].split("://", 1)[1]
    st = cluster.state()
    if st is None:
        raise ClusterError(f"cluster {cluster.name!r} is not up")
    rn = cluster.real_node(pod["spec"]["nodeName"])
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
