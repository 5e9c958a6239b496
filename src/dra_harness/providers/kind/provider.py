"""kind clusters with the example DRA driver: engine, node image, create, driver, wait, delete.

Why a provider of its own rather than "use --cluster=existing on a kind kubeconfig":
a DRA-ready kind cluster needs the right gates per release (``kind/kind-<v>.yaml``),
CDI in containerd, the driver image inside every node (no registry here) and the driver
installed and publishing before any suite starts. Once that is done the kubeconfig goes
down the same code path as ``existing``.

Everything comes from this machine: the Docker engine (``engine``: a running one, or
Debian's dockerd started as root), kind and Helm built from their Go modules, the node
image built here (``nodeimage``) unless ``--kind-node-image`` names one, and the driver
by its own chart (``driver``). What a cluster was made with and how long each step took
is kept in its state directory (``created.json``) for the report's fingerprint.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.errors import BuildError, InputError
from dra_harness.providers.chart_values import shown_helm_args
from dra_harness.providers.kind import config as kind_config
from dra_harness.components import emulated_gpus
from dra_harness.providers.kind import driver, engine, nodeimage, nvidia
from dra_harness.providers.kind.tools import KindError, run

log = logging.getLogger(__name__)

DEFAULT_NAME = "dra-harness"
NETWORK = "kind"  # the Docker network kind puts every cluster's nodes on


def kind_binary() -> str:
    """kind built from its Go module (cached), whatever else is on PATH: one pinned release."""
    return str(builder.build_all([catalog.KIND], quiet=True)[catalog.KIND.dirname].binary("kind"))


def install_method(install: str) -> str:
    """``auto``: the driver's own Helm chart (Helm is built here); ``manifests`` only when asked."""
    return "helm" if install == "auto" else install


def check_prerequisites(install: str = "auto") -> None:
    """One line for the first thing missing that the harness cannot provide, before anything is created."""
    reason = None if engine.running() else engine.cannot_start()
    if reason:
        raise KindError(reason)
    try:
        builder.go_version()
    except BuildError as e:
        raise KindError(f"the kind provider builds kind and Helm: {e}") from None
    if install_method(install) == "manifests" and not driver.MANIFESTS.exists():
        raise KindError(f"--install manifests needs {driver.MANIFESTS}, which is missing; use --install helm")


# -- the cluster -----------------------------------------------------------------------
def state_dir(name: str) -> Path:
    return builder.cache_root() / "kind" / name


def kubeconfig_path(name: str) -> Path:
    return state_dir(name) / "kubeconfig"


def clusters() -> list[str]:
    if not engine.running():
        return []
    out = run([kind_binary(), "get", "clusters"], "listing kind clusters", timeout=60)
    return [ln.strip() for ln in out.splitlines() if ln.strip() and not ln.startswith("No kind clusters")]


def nodes(name: str) -> list[str]:
    out = run([kind_binary(), "get", "nodes", "--name", name], f"listing the nodes of kind cluster {name}", timeout=60)
    return [ln.strip() for ln in out.splitlines() if ln.strip() and not ln.startswith(("using", "No kind"))]


def _network_exists() -> bool:
    return subprocess.run(["docker", "network", "inspect", NETWORK], capture_output=True).returncode == 0


@dataclass
class KindSpec:
    name: str = DEFAULT_NAME
    k8s_version: str = catalog.DEFAULT_KUBERNETES_VERSION
    workers: int = 2
    gpus_per_node: int = 8
    node_image: str | None = None  # None: the node image built here for k8s_version
    driver_image: str | None = None  # None: the image of the plugin we build
    install: str = "auto"  # auto (helm) | helm | manifests
    timeout: float = 900.0
    driver: str = "example"  # example, or nvidia: NVIDIA's chart over emulated GPUs (:mod:`.nvidia`)
    nvidia_version: str = catalog.NVIDIA_DRIVER_VERSIONS[0]
    gpu_profile: str = "h100"
    #: The user's ``--values FILE`` / ``--set KEY=VALUE`` arguments for the driver's chart, after ours.
    helm_args: tuple[str, ...] = ()


def created(name: str) -> dict[str, Any]:
    """What ``up`` recorded about the cluster (node image, install, step timings); {} when nothing."""
    try:
        return json.loads((state_dir(name) / "created.json").read_text())
    except (OSError, ValueError):
        return {}


def _record(name: str, **facts: Any) -> None:
    path = state_dir(name) / "created.json"
    path.write_text(json.dumps({**created(name), **facts}, indent=2, sort_keys=True))


def up(spec: KindSpec, say: Callable[[str], None] = lambda s: None) -> Path:
    """Create (or reuse) the kind cluster, get the driver running, return its kubeconfig."""
    catalog.kubernetes(spec.k8s_version)  # one line for an unsupported version
    if spec.helm_args and spec.install == "manifests":
        raise InputError("--helm-set/--helm-values go to the driver's Helm chart; they need --install helm or auto, "
                         "not manifests")
    check_prerequisites(spec.install)
    method = install_method(spec.install)
    deadline = time.monotonic() + spec.timeout
    state_dir(spec.name).mkdir(parents=True, exist_ok=True, mode=0o700)
    if engine.ensure(say):
        _record(spec.name, engine_started=True)
    kind = kind_binary()
    if spec.name not in clusters():
        image, built_s = spec.node_image, 0.0
        if image is None:
            image, built_s = nodeimage.ensure(spec.k8s_version, say)
        patches = nodeimage.kubeadm_patches() if nodeimage.built_here(image) else None
        _record(spec.name, node_image=image, node_image_built_here=patches is not None, node_image_build_s=round(built_s, 1),
                network_created=not _network_exists(), k8s_version=spec.k8s_version, workers=spec.workers)
        say(f"creating kind cluster {spec.name} (Kubernetes v{spec.k8s_version}, {spec.workers} workers)")
        config = state_dir(spec.name) / "kind-config.yaml"
        config.write_text(yaml.safe_dump(kind_config.for_cluster(spec.k8s_version, spec.workers, image, patches), sort_keys=False))
        started = time.monotonic()
        run([kind, "create", "cluster", "--name", spec.name, "--config", str(config), "--wait", "180s"],
            f"kind create cluster {spec.name}", timeout=max(60, deadline - time.monotonic()))
        _record(spec.name, kind_create_s=round(time.monotonic() - started, 1))
    kubeconfig = kubeconfig_path(spec.name)
    kubeconfig.write_text(run([kind, "get", "kubeconfig", "--name", spec.name], "kind get kubeconfig", timeout=60))
    kubeconfig.chmod(0o600)
    started = time.monotonic()
    if spec.driver == "nvidia":
        say("loading the workload and NVML probe images into the nodes")
        loaded = driver.load_images(nodes(spec.name), None, nvidia=True)
        say(f"installing NVIDIA's DRA driver v{spec.nvidia_version} over emulated {spec.gpu_profile.upper()} GPUs (helm)")
        workers = [n for n in nodes(spec.name) if n != f"{spec.name}-control-plane"]
        how = nvidia.install(spec.name, workers, kubeconfig, spec.nvidia_version, spec.gpu_profile, state_dir(spec.name) / "helm",
                             spec.helm_args)
        image = nvidia.image_name(spec.nvidia_version)
        say("waiting for every worker's ResourceSlices")
        # The user's values may change what a node publishes (MIG devices, fewer GPUs): any count then.
        counts = driver.wait_for_slices(kubeconfig, spec.workers, None if spec.helm_args else emulated_gpus.GPUS, deadline,
                                        nvidia.DRIVER)
    else:
        say("loading the driver and workload images into the nodes")
        loaded = driver.load_images(nodes(spec.name), spec.driver_image)
        image = spec.driver_image or driver.DRIVER_IMAGE
        say(f"installing the example driver ({method})")
        name, per_node = driver.DRIVER_NAME, spec.gpus_per_node  # type: str, int | None
        if method == "helm":
            how = driver.install_with_helm(kubeconfig, image, spec.gpus_per_node, state_dir(spec.name) / "helm", spec.helm_args)
            if spec.helm_args:  # a profile renames the driver (net.example.com); partitions change the count
                name, per_node = driver.installed_driver_name(kubeconfig, state_dir(spec.name) / "helm"), None
        else:
            driver.install_with_manifests(kubeconfig, image, spec.gpus_per_node)
            how = f"our manifests ({driver.MANIFESTS.name})"
        say(f"waiting for every worker's ResourceSlices of {name}")
        counts = driver.wait_for_slices(kubeconfig, spec.workers, per_node, deadline, name)
    _record(spec.name, driver_install=how, driver_image=image, images_loaded=loaded, devices_per_node=counts,
            helm_args=shown_helm_args(spec.helm_args),
            driver_to_slices_s=round(time.monotonic() - started, 1), driver=spec.driver,
            **({"nvidia_version": spec.nvidia_version, "gpu_profile": spec.gpu_profile} if spec.driver == "nvidia" else {}))
    (state_dir(spec.name) / "ready").touch()
    log.info("kind cluster %s: up, driver installed (%s) and publishing", spec.name, method)
    return kubeconfig


def is_ready(name: str) -> bool:
    """A cluster that ``up`` finished (driver publishing), and that kind still has."""
    return (state_dir(name) / "ready").exists() and kubeconfig_path(name).exists() and name in clusters()


def down(name: str, say: Callable[[str], None] = lambda s: None) -> bool:
    """Delete the kind cluster and our state for it; stop the engine we started once no cluster is left.

    False when there was no such cluster. kind keeps its Docker network; we remove it when
    our ``up`` created it and no cluster uses it any more.
    """
    facts = created(name)
    existed = name in clusters()
    if existed:
        log.info("kind cluster %s: deleting", name)
        say(f"deleting kind cluster {name}")
        run([kind_binary(), "delete", "cluster", "--name", name], f"kind delete cluster {name}", timeout=300)
    remaining = clusters()
    if engine.running() and not remaining and facts.get("network_created") and _network_exists():
        subprocess.run(["docker", "network", "rm", NETWORK], capture_output=True)
    shutil.rmtree(state_dir(name), ignore_errors=True)
    if not remaining:
        for change in engine.stop(say):
            log.info("undid Docker's host change: %s", change)
    return existed

