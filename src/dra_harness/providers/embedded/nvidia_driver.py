"""NVIDIA's DRA driver (its GPU kubelet plugin) on an embedded cluster's node, over emulated GPUs.

Why: the nvidia profile was written from NVIDIA's chart and source, never run against the driver; no
GPU machine is lent to us. Here NVIDIA's own ``gpu-kubelet-plugin`` (built from its Go module,
:func:`dra_harness.components.catalog.nvidia_driver`) runs for a node as the example driver does on a
simulated node, against a **driver root** of ours: the emulated ``libnvidia-ml.so.1``
(:mod:`dra_harness.components.nvml`, seeded per cluster and node so UUIDs are the node's own), the
device nodes ``dev/nvidia<i>`` the library and the driver look for, and an ``nvidia-smi`` that records
the time-slicing settings the plugin applies and refuses the rest (:data:`.emulated_gpus.NVIDIA_SMI`). What the
driver publishes, and what the scheduler allocates from it, is then NVIDIA's code on NVIDIA's GPU
definitions: only the hardware is missing.

Everything lives in the cluster's state directory (``nvidia/<node>``) and its runtime directory (the
plugin's sockets), so ``cluster down`` leaves nothing on the host; :func:`stop` also deletes the node's
``gpu.nvidia.com`` slices, which on a simulated node no kubelet would remove.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from dra_harness.components import catalog
from dra_harness.errors import ClusterError
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.components import emulated_gpus
from dra_harness.providers.embedded.cluster import LocalCluster

DRIVER = "gpu.nvidia.com"
GPUS = emulated_gpus.GPUS
LIB_DIR = emulated_gpus.LIB_DIR


def driver_root(cluster: LocalCluster, node: str, profile: str = "h100", seed: str | None = None,
                char_devices: bool = False, gpus: int = GPUS) -> Path:
    """The node's driver root (:func:`emulated_gpus.driver_root`) in the cluster's state, seeded for the cluster
    and node unless ``seed`` says otherwise (other GPUs in the same slots)."""
    return emulated_gpus.driver_root(cluster.state_dir / "nvidia" / node, profile, seed or f"{cluster.name}-{node}",
                                     gpus=gpus, char_devices=char_devices)


def start(cluster: LocalCluster, node: str, version: str = catalog.NVIDIA_DRIVER_VERSIONS[0], profile: str = "h100") -> Path:
    """NVIDIA's plugin in place of the example driver on ``node`` (stopped, its slices deleted), over emulated
    ``profile`` GPUs; returns the driver root it reads. On a real node its CDI specs reach the node's runtime."""
    st = cluster.state()
    if st is None:
        raise ClusterError(f"cluster {cluster.name!r} is not up")
    if node not in st.spec.all_node_names():
        raise ClusterError(f"node {node!r} is not a node of cluster {cluster.name!r}")
    if node in st.driver_pods:
        raise ClusterError(f"the driver on {node} is a DaemonSet's pod: replace the DaemonSet, not the process")
    running = cluster.supervisor.get(f"driver-{node}")
    was_running = running is not None and running.alive()  # stop() restarts the example driver only if it ran
    cluster.stop_driver(node)
    kube = cluster.kube()
    for s in kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.nodeName={node}"):
        if s["spec"]["driver"] != DRIVER:
            kube.delete(rest.RESOURCE_SLICES, s["metadata"]["name"])
    root = driver_root(cluster, node, profile, char_devices=node in st.spec.real_node_names())
    cluster.record_nvidia(node, {**emulated_gpus.entry(version, profile, root), "example_was_running": str(was_running)})
    cluster.start_driver(node)
    return root


def roll(cluster: LocalCluster, node: str, version: str) -> None:
    """The node's plugin replaced by ``version``'s over the same driver root (its slices stay: the new plugin
    takes them over), as a DaemonSet roll replaces the pod when the old one goes first."""
    st = cluster.state()
    if st is None or node not in st.nvidia:
        raise ClusterError(f"NVIDIA's driver does not run on {node}: nothing to roll")
    cluster.stop_driver(node)
    cluster.record_nvidia(node, {**st.nvidia[node], **emulated_gpus.entry(version, st.nvidia[node]["profile"], Path(st.nvidia[node]["root"]))})
    cluster.start_driver(node)


def stop(cluster: LocalCluster, kube: Kube, node: str) -> None:
    """NVIDIA's plugin stopped, its slices deleted (no kubelet removes them on a simulated node, a real node's
    only after 30 s), its root gone, and the example driver back if it ran before: the node as :func:`start` found it."""
    cluster.stop_driver(node)
    for s in kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={DRIVER},spec.nodeName={node}"):
        kube.delete(rest.RESOURCE_SLICES, s["metadata"]["name"])
    st = cluster.state()
    restore = st is not None and st.nvidia.get(node, {}).get("example_was_running") != "False"
    cluster.record_nvidia(node, None)
    shutil.rmtree(cluster.state_dir / "nvidia" / node, ignore_errors=True)
    if restore:  # what start() stopped, and only that
        cluster.start_driver(node)


def identities(slices: list[Obj], node: str) -> dict[str, str]:
    """Device name -> published ``uuid`` of the node's ``gpu.nvidia.com`` devices."""
    return {d["name"]: d["attributes"]["uuid"]["string"] for s in slices
            if s["spec"]["driver"] == DRIVER and s["spec"].get("nodeName") == node for d in s["spec"].get("devices") or []}


def changed_identities(before: dict[str, str], slices: list[Obj], node: str, held: list[str]) -> list[str]:
    """How the devices ``held`` (names) differ after a roll from what they were: gone, or another GPU under the
    same name (a claim allocated by name would then point at a GPU its pod never had). Empty: unchanged."""
    after = identities(slices, node)
    return [f"{name}: {before.get(name)} -> {after.get(name, 'no longer published')}" for name in held
            if after.get(name) != before.get(name)]


