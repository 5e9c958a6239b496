"""NVIDIA's DRA driver (its GPU kubelet plugin) on an embedded cluster's node, over emulated GPUs.

Why: the nvidia profile was written from NVIDIA's chart and source, never run against the driver; no
GPU machine is lent to us. Here NVIDIA's own ``gpu-kubelet-plugin`` (built from its Go module,
:func:`dra_harness.components.catalog.nvidia_driver`) runs for a node as the example driver does on a
simulated node, against a **driver root** of ours: the emulated ``libnvidia-ml.so.1``
(:mod:`dra_harness.components.nvml`, seeded per cluster and node so UUIDs are the node's own), the
device nodes ``dev/nvidia<i>`` the library and the driver look for, and an ``nvidia-smi`` that says it
is not emulated (the plugin requires one to exist; it runs it only for sharing settings). What the
driver publishes, and what the scheduler allocates from it, is then NVIDIA's code on NVIDIA's GPU
definitions: only the hardware is missing.

Everything lives in the cluster's state directory (``nvidia/<node>``) and its runtime directory (the
plugin's sockets), so ``cluster down`` leaves nothing on the host; :func:`stop` also deletes the node's
``gpu.nvidia.com`` slices, which on a simulated node no kubelet would remove.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from dra_harness.components import build as builder
from dra_harness.components import catalog, nvml
from dra_harness.components.gomod import module_source
from dra_harness.errors import ClusterError
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube, Obj
from dra_harness.providers.embedded.cluster import LocalCluster

DRIVER = "gpu.nvidia.com"
GPUS = 8
LIB_DIR = "usr/lib/x86_64-linux-gnu"
NVIDIA_SMI = "#!/bin/sh\necho 'nvidia-smi is not emulated (dra-harness emulated GPUs)' >&2\nexit 1\n"


def process(node: str) -> str:
    return f"nvidia-driver-{node}"


def driver_root(cluster: LocalCluster, node: str, profile: str = "h100", seed: str | None = None) -> Path:
    """The node's driver root: the emulated NVML seeded for this cluster and node (or ``seed``: other GPUs in
    the same slots), its device nodes, nvidia-smi."""
    root = cluster.state_dir / "nvidia" / node
    if root.exists():
        shutil.rmtree(root)
    lib = nvml.build(profile, seed or f"{cluster.name}-{node}")
    (root / LIB_DIR).mkdir(parents=True)
    # As a driver installs it: the versioned file and the soname link (the toolkit finds libraries by version).
    versioned = f"libnvidia-ml.so.{nvml.DRIVER_VERSION}"
    shutil.copy2(lib.path, root / LIB_DIR / versioned)
    (root / LIB_DIR / nvml.LIBRARY).symlink_to(versioned)
    (root / "dev").mkdir()
    for minor in range(GPUS):  # plain files: on a simulated node nothing opens them, the library only looks
        (root / "dev" / f"nvidia{minor}").touch()
    (root / "dev" / "nvidiactl").touch()
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "nvidia-smi").write_text(NVIDIA_SMI)
    (root / "usr" / "bin" / "nvidia-smi").chmod(0o755)
    return root


def argv(binary: Path, node: str, kubeconfig: Path, root: Path, dirs: dict[str, Path]) -> list[str]:
    return [str(binary), f"--node-name={node}", f"--kubeconfig={kubeconfig}",
            f"--nvidia-driver-root={root}", f"--container-driver-root={root}", f"--cdi-root={dirs['cdi']}",
            f"--kubelet-plugins-directory-path={dirs['plugins']}",
            f"--kubelet-registrar-directory-path={dirs['registrar']}",
            # The hook CDI specs name for containers; no container starts on a simulated node.
            "--nvidia-cdi-hook-path=/bin/true",
            "--image-name=dra-harness/not-pulled", "--healthcheck-port=-1", "-v=3"]


def start(cluster: LocalCluster, node: str, version: str = catalog.NVIDIA_DRIVER_VERSIONS[0], profile: str = "h100") -> Path:
    """NVIDIA's plugin for simulated ``node`` over emulated ``profile`` GPUs; the driver root it reads."""
    st = cluster.state()
    if st is None:
        raise ClusterError(f"cluster {cluster.name!r} is not up")
    if node not in st.spec.all_node_names() or node.startswith("real-node-"):
        raise ClusterError(f"node {node!r} is not a simulated node of cluster {cluster.name!r}")
    root = driver_root(cluster, node, profile)
    _run(cluster, node, version, root)
    return root


def roll(cluster: LocalCluster, node: str, version: str) -> None:
    """The node's plugin replaced by ``version``'s over the same driver root (its slices stay: the new plugin
    takes them over), as a DaemonSet roll replaces the pod when the old one goes first."""
    root = cluster.state_dir / "nvidia" / node
    if not root.is_dir():
        raise ClusterError(f"NVIDIA's driver does not run on {node}: nothing to roll")
    cluster.supervisor.stop(process(node), grace=10)
    _run(cluster, node, version, root)


def _run(cluster: LocalCluster, node: str, version: str, root: Path) -> None:
    component = catalog.nvidia_driver(version)
    binary = builder.build_all([component])[component.dirname].binary("gpu-kubelet-plugin")
    base = cluster.runtime_dir / node / "nvidia"
    dirs = {"registrar": base / "reg", "plugins": base / "plugins", "cdi": base / "cdi"}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    cluster.supervisor.start(process(node), argv(binary, node, cluster.kubeconfig, root, dirs),
                             env={"DRA_HARNESS_NVML_DEV_ROOT": str(root / "dev")})


def stop(cluster: LocalCluster, kube: Kube, node: str) -> None:
    """The plugin stopped, its slices deleted (no kubelet removes them on a simulated node), its root gone."""
    cluster.supervisor.stop(process(node), grace=10)
    for s in kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={DRIVER},spec.nodeName={node}"):
        kube.delete(rest.RESOURCE_SLICES, s["metadata"]["name"])
    shutil.rmtree(cluster.state_dir / "nvidia" / node, ignore_errors=True)
    shutil.rmtree(cluster.runtime_dir / node / "nvidia", ignore_errors=True)


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


_NAME = re.compile(r"^\s*name:\s*(\S+)\s*$", re.M)
_CEL = re.compile(r'expression:\s*"([^"]+)"')


def chart_device_classes(version: str = catalog.NVIDIA_DRIVER_VERSIONS[0]) -> list[Obj]:
    """The GPU and MIG DeviceClasses of the driver's Helm chart, read from its module (name and CEL as written)."""
    templates = module_source(catalog.nvidia_driver(version)) / "deployments" / "helm" / "dra-driver-nvidia-gpu" / "templates"
    out = []
    for kind in ("gpu", "mig"):
        text = (templates / f"deviceclass-{kind}.yaml").read_text()
        name, cel = _NAME.search(text), _CEL.search(text)
        if not name or not cel:
            raise ClusterError(f"the chart's deviceclass-{kind}.yaml no longer reads as a name and one CEL selector")
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name.group(1)},
                    "spec": {"selectors": [{"cel": {"expression": cel.group(1)}}]}})
    return out
