"""Bring the embedded cluster's real nodes up and take every trace of them down.

Kept apart from ``cluster.py`` because it is host plumbing (cgroups, mounts,
network namespaces, image imports) the simulated cluster never needs; the cluster
calls :func:`start` during ``up`` and :func:`teardown` first thing in ``down``.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from dra_harness.kube import rest
from dra_harness.labels import DISRUPTABLE_LABEL
from dra_harness.components import images
from dra_harness.components import gates
from dra_harness.providers.embedded.hostplumbing import (
    add_host_link,
    delete_link,
    hierarchies,
    make_cgroup_root,
    mounts_under,
    remove_cgroup_root,
    unmount_all,
)
from dra_harness.providers.embedded.core import ClusterCore
from dra_harness.providers.embedded.pki import PKI
from dra_harness.providers.embedded.ports import take as take_ports
from dra_harness.host.processes import Tracked, cmdline, process_start_time, stop_group, strays
from dra_harness.components.real_node_host import unavailable_reason
from dra_harness.providers.embedded.realnode import REAL_LABEL, RealNode, RealNodeError, node_key
from dra_harness.providers.localstate import ClusterState
from dra_harness.retrying import NotYet, until

log = logging.getLogger(__name__)


def _env(st: ClusterState) -> dict[str, str]:
    """containerd finds its shim, and the kubelet its runtime, on PATH."""
    return {"PATH": f"{Path(st.binaries['containerd']).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}


def node(cluster: ClusterCore, name: str, runtime_dir: Path | None = None) -> RealNode:
    """Real node ``name`` of ``cluster``, its directories in the cluster's (or the given) runtime dir."""
    index = int(name.rsplit("-", 1)[1])
    return RealNode(name, runtime_dir or cluster.runtime_dir, node_key(cluster.state_dir), index)


def _gates_dict(version: str) -> dict[str, bool]:
    flag = gates.feature_gates_flag(version)
    return {k: v == "true" for k, v in (kv.split("=") for kv in flag.split(",") if kv)}


def boot_containerd(cluster: ClusterCore, st: ClusterState, pki: PKI, say: Callable[[str], None]) -> None:
    """Per real node: containerd, with the images imported. It needs no API server, so it runs while that starts."""
    reason = unavailable_reason()
    if reason:
        raise RealNodeError(f"cannot start real nodes: {reason}")
    tarballs = images.tarballs(Path(st.binaries["dra-example-kubeletplugin"]), st.spec.driver_version)
    if st.spec.driver == "nvidia":  # what the GPU-visibility checks run in, as --probe-image on a GPU cluster
        tarballs.append(images.tarball(images.nvml_probe_image()))
    env = _env(st)
    for name in st.spec.real_node_names():
        rn = node(cluster, name)
        t0 = time.monotonic()
        say(f"starting containerd on {name}")
        serving = pki.issue(f"kubelet-{name}-serving", f"system:node:{name}", ("system:nodes",),
                            hosts=(rn.node_ip, name), client=False)
        ports = take_ports(["kubelet", "kubelet-healthz"])
        rn.write_configs(images.pause_image().name, pki.ca_cert, serving, ports["kubelet"], ports["kubelet-healthz"],
                         _gates_dict(st.version_of(f"kubelet-{name}")))
        make_cgroup_root(rn.cgroup_root)
        add_host_link(rn.host_link, rn.node_ip)
        cluster.supervisor.start(f"containerd-{name}", rn.containerd_argv(st.binaries["containerd"]), env=env)
        _wait_containerd(cluster, rn, st.binaries["ctr"])
        import_images(cluster, st, name, tarballs)
        st.timings[f"{name}_containerd_ready"] = time.monotonic() - t0


def start_kubelets(cluster: ClusterCore, st: ClusterState, pki: PKI, say: Callable[[str], None]) -> None:
    """Per real node (its containerd booted): the kubelet and the driver plugin; returns once every one is Ready.

    After the API server is ready: a kubelet's identity is authorised by the roles RBAC's bootstrap creates."""
    started: dict[str, float] = {}
    for name in st.spec.real_node_names():
        identity = pki.issue(f"kubelet-{name}", f"system:node:{name}", ("system:nodes",))
        pki.kubeconfig(_kubelet_kubeconfig(cluster, name), st.server, identity, cluster=cluster.name, user=f"system:node:{name}")
        say(f"starting kubelet on {name}")
        _start_kubelet(cluster, st, node(cluster, name))
        started[name] = time.monotonic()
        cluster.start_driver(name)
    for name, at in started.items():
        _wait_ready(cluster, name, at + 120)
        st.timings[f"{name}_ready_after_kubelet_start"] = time.monotonic() - at


def import_images(cluster: ClusterCore, st: ClusterState, name: str, tarballs: list[Path]) -> None:
    """Put OCI tarballs into real node ``name``'s containerd, as an image preloaded on a node: no pull."""
    rn = node(cluster, name)
    for tar in tarballs:
        out = rn.ctr(st.binaries["ctr"], "images", "import", "--no-unpack=false", str(tar), timeout=120)
        if out.returncode != 0:
            raise RealNodeError(f"{name}: ctr images import {tar.name} failed: {out.stderr.strip()[-300:]}")


def reboot(cluster: ClusterCore, name: str, timeout: float = 180) -> float:
    """Do to real node ``name`` what a reboot does, without rebooting the host: every process of the
    node stops (containers killed, as when the power goes), what a real host keeps on tmpfs under
    /run is emptied (containerd's and runc's state, the CDI spec directory the driver writes) and
    every mount is gone; the disk (images, the kubelet's root with its checkpoints) stays. Then
    containerd, the kubelet and the driver start as at boot (a DaemonSet's driver: by its kubelet). Returns seconds until the node is Ready."""
    st = cluster.state()
    if st is None:
        raise RealNodeError(f"cluster {cluster.name!r} is not up")
    rn = node(cluster, name)
    _power_off(cluster, rn, {"killed": [], "unmounted": []})
    for runtime in (rn.containerd_state, rn.base / "runc", rn.cdi_dir):
        shutil.rmtree(runtime, ignore_errors=True)
    rn.cdi_dir.mkdir(parents=True)
    make_cgroup_root(rn.cgroup_root)
    booted, wall = time.monotonic(), time.time()
    cluster.supervisor.start(f"containerd-{name}", rn.containerd_argv(st.binaries["containerd"]), env=_env(st))
    _wait_containerd(cluster, rn, st.binaries["ctr"])
    _start_kubelet(cluster, st, rn)
    if name not in st.driver_pods:  # a DaemonSet's driver pod is the kubelet's to start again
        cluster.start_driver(name)
    _wait_ready(cluster, name, booted + timeout, since=wall)
    return time.monotonic() - booted


def _kubelet_kubeconfig(cluster: ClusterCore, name: str) -> Path:
    return cluster.state_dir / f"kubelet-{name}.kubeconfig"


def _start_kubelet(cluster: ClusterCore, st: ClusterState, rn: RealNode) -> None:
    labels = {DISRUPTABLE_LABEL: "true", "type": "real", REAL_LABEL: "true"}
    argv = rn.kubelet_argv(st.binary_of(f"kubelet-{rn.name}", "kubelet"), _kubelet_kubeconfig(cluster, rn.name), labels)
    cluster.supervisor.start(f"kubelet-{rn.name}", argv, env=_env(st))


def start_kubelet(cluster: ClusterCore, st: ClusterState, name: str, timeout: float = 120) -> float:
    """Start the kubelet ``st`` names for real node ``name`` (another release after an in-place swap)
    with that release's feature gates; containerd and the node's containers kept running while it was
    stopped, as in a drain-free kubelet upgrade. Returns seconds until the node is Ready at that release."""
    rn = node(cluster, name)
    config_path = rn.etc / "kubelet.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["featureGates"] = _gates_dict(st.version_of(f"kubelet-{name}"))
    config_path.write_text(yaml.safe_dump(config))
    started, wall = time.monotonic(), time.time()
    _start_kubelet(cluster, st, rn)
    _wait_ready(cluster, name, started + timeout, version=st.version_of(f"kubelet-{name}"), since=wall)
    return time.monotonic() - started


def _wait_ready(cluster: ClusterCore, name: str, deadline: float, version: str | None = None,
                since: float | None = None) -> None:
    """Until the node is Ready (with ``version``: reported so by a kubelet of that release; with
    ``since``, a wall-clock time: by a heartbeat no older than it, so not the stale status of the
    kubelet that was stopped)."""
    kube = cluster.kube()

    def attempt() -> None:
        tracked = cluster.supervisor.get(f"kubelet-{name}")
        if tracked is None or not tracked.alive():
            raise RealNodeError(f"kubelet on {name} exited: {cluster.supervisor.log_tail(f'kubelet-{name}')}")
        try:
            node = kube.get(rest.NODES, name)
        except rest.ApiError as e:  # not registered yet
            raise NotYet(str(e)) from None
        running = node.get("status", {}).get("nodeInfo", {}).get("kubeletVersion")
        if version and running != f"v{version}":
            raise NotYet(f"the node reports kubelet {running}, not v{version} yet")
        ready = [c for c in node.get("status", {}).get("conditions", []) if c.get("type") == "Ready"]
        if not (ready and ready[0].get("status") == "True"):
            raise NotYet(ready[0].get("message", "") if ready else "no Ready condition")
        beat = ready[0].get("lastHeartbeatTime")
        if since is not None and (not beat or _epoch(beat) < int(since)):
            raise NotYet(f"Ready, but the last heartbeat ({beat}) is older than the restart")

    try:
        until(deadline, 0.1, log, f"the kubelet on {name} to be Ready")(attempt)
    except NotYet as last:
        raise RealNodeError(f"{name} not Ready: {last}") from None


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def _wait_containerd(cluster: ClusterCore, rn: RealNode, ctr: str, timeout: float = 30) -> None:
    def attempt() -> None:
        tracked = cluster.supervisor.get(f"containerd-{rn.name}")
        if tracked is None or not tracked.alive():
            raise RealNodeError(f"containerd on {rn.name} exited: {cluster.supervisor.log_tail(f'containerd-{rn.name}')}")
        if not rn.socket.exists():
            raise NotYet("its socket is not there yet")
        out = rn.ctr(ctr, "version", timeout=10)
        if out.returncode != 0:
            raise NotYet(out.stderr.strip())

    try:
        until(time.monotonic() + timeout, 0.2, log, f"containerd on {rn.name} to serve")(attempt)
    except NotYet as last:
        raise RealNodeError(f"containerd on {rn.name} not serving after {timeout:.0f}s: {last}") from None


def real_node_dirs(cluster: ClusterCore, runtime_dir: Path) -> list[RealNode]:
    """Real nodes found on disk (works without cluster.json, e.g. after a killed run)."""
    if not runtime_dir.is_dir():
        return []
    return [node(cluster, f"real-node-{d.name[1:]}", runtime_dir) for d in sorted(runtime_dir.iterdir())
            if d.name[:1] == "r" and d.name[1:].isdigit() and (d / "etc" / "containerd.toml").exists()]


def _power_off(cluster: ClusterCore, rn: RealNode, removed: dict[str, list[Any]]) -> None:
    """Stop every process of a real node (kubelet, driver, containers, containerd, shims) and unmount
    what is mounted below its directories, as when the power goes; what had to go by force is added
    to ``removed``. Shared by ``teardown`` and ``reboot``."""
    # The kubelet first, or it restarts what we kill; the driver with it.
    cluster.supervisor.stop(f"kubelet-{rn.name}", grace=5)
    cluster.supervisor.stop(f"driver-{rn.name}", grace=5)
    # Lost pid files (a killed run): find the kubelet and the plugin by the dirs they name.
    for pid in strays(rn.base) + strays(rn.kubelet_root):
        if any(flag in cmdline(pid) for flag in ("--root-dir=", "--kubelet-registrar-directory-path=")):
            stop_group(Tracked("stray", pid, process_start_time(pid) or ""), 2, signal.SIGTERM)
            removed["killed"].append(pid)
    # Every container process of the node lives under its cgroup root.
    removed["killed"] += remove_cgroup_root(rn.cgroup_root)
    cluster.supervisor.stop(f"containerd-{rn.name}", grace=5)
    for pid in strays(rn.base) + strays(rn.kubelet_root):  # shims (their -address names the node's socket)
        stop_group(Tracked("shim", pid, process_start_time(pid) or ""), 2, signal.SIGTERM)
        removed["killed"].append(pid)
    for d in rn.host_dirs:
        removed["unmounted"] += unmount_all(d)
    remove_cgroup_root(rn.cgroup_root)


def teardown(cluster: ClusterCore, runtime_dir: Path) -> dict[str, list[Any]]:
    """Stop kubelets, kill every container, stop containerd and shims, unmount, remove links and cgroups.

    Returns what had to be removed by force (for the record; normally containers only).
    """
    removed: dict[str, list[Any]] = {"killed": [], "unmounted": [], "links": []}
    for rn in real_node_dirs(cluster, runtime_dir):
        _power_off(cluster, rn, removed)
        for link in (rn.bridge, rn.host_link):
            if Path("/sys/class/net", link).exists():
                delete_link(link)
                removed["links"].append(link)
        for d in rn.host_dirs:
            shutil.rmtree(d, ignore_errors=True)
    return removed


def leftovers(runtime_dir: Path, nodes: list[RealNode]) -> list[str]:
    """Anything of the given real nodes (of the cluster with ``runtime_dir``) still on the host:
    processes, mounts, directories, links, and cgroups in every hierarchy the host mounts."""
    left = []
    for d in [runtime_dir] + [rn.kubelet_root for rn in nodes]:
        left += [f"mount {m}" for m in mounts_under(d)]
        left += [f"process {p}" for p in strays(d)]
        left += [f"directory {d}"] if d.exists() else []
    for rn in nodes:
        left += [f"link {b}" for b in (rn.bridge, rn.host_link) if Path("/sys/class/net", b).exists()]
        root = rn.cgroup_root.lstrip("/")
        left += [f"cgroup {h / root}" for h in hierarchies() if (h / root).exists()]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left += [f"netns {line}" for line in netns.splitlines() if str(runtime_dir) in line]
    return left
