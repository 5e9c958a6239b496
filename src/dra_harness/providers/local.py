"""A cluster this machine runs, as the commands that drive it may use it: typed protocols and one door.

Why: ``cluster`` commands, in-place upgrades, benchmarks and the queue design's Kueue drive a cluster
whose processes run here (swap a binary, restart a component, reboot a real node, roll the driver's
DaemonSet). They need more than a kubeconfig, yet must not reach into the provider that implements
it: a change inside :mod:`dra_harness.providers.embedded` would then ripple through them, and a
second provider of local clusters could never stand in. So they type against :class:`LocalClusterApi`
and open one with :func:`dra_harness.providers.open_cluster`, which asks the provider registry (an entry point, as pytest's
plugins are found) for a provider whose ``local_cluster`` ability is not None. Nothing outside the
provider imports it; an import-linter contract holds that.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.providers.localstate import ClusterSpec, ClusterState


class Etcd(Protocol):
    """The cluster's etcd, reached directly: which API version each stored object was written in, and the
    writes a fault injection makes behind the API server's back."""

    def stored_versions(self, prefix: str) -> dict[str, str]: ...

    def put(self, key: str, value: str) -> None: ...

    def delete(self, key: str) -> None: ...


class RealNodeApi(Protocol):
    """One real node's containerd, for what only its CLI can do (kill a container's task)."""

    def ctr(self, ctr: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]: ...


class RunningKueue(Protocol):
    """Kueue started beside the cluster: where its /metrics listens."""

    @property
    def metrics_port(self) -> int: ...


class LocalClusterApi(Protocol):
    """A cluster whose processes run on this machine, by name; its state survives the process that started it."""

    name: str
    state_dir: Path

    @property
    def kubeconfig(self) -> Path: ...

    def state(self) -> ClusterState | None: ...

    def exists(self) -> bool: ...

    def kube(self) -> Kube: ...

    def up(self, spec: ClusterSpec, timeout: float = 120.0, say: Callable[[str], None] = ...) -> ClusterState: ...

    def down(self) -> None: ...

    def status(self) -> dict[str, Any]: ...

    def pids(self) -> list[int]: ...

    # -- what upgrades and faults change in place ------------------------------------
    def swap(self, process: str, version: str, binary: str) -> tuple[float, float]: ...

    def restart_component(self, name: str, kill: bool = False, down_for: float = 0.0) -> None: ...

    def etcd(self) -> Etcd: ...

    def driver_dirs(self, node: str) -> dict[str, Path]: ...

    def start_driver(self, node: str) -> None: ...

    def stop_driver(self, node: str, kill: bool = False) -> None: ...

    def real_node(self, name: str) -> RealNodeApi: ...

    def reboot(self, node: str, timeout: float = 180) -> float: ...

    def install_driver_daemonset(self, kube: Kube, node: str, version: str, plugin: str,
                                 strategy: str = "surge") -> list[Obj]: ...

    def roll_driver_daemonset(self, kube: Kube, node: str, version: str, plugin: str) -> tuple[float, float]: ...

    # -- Kueue beside it (the queue design) ----------------------------------------------
    def start_kueue(self, kube: Kube, device_class_mappings: dict[str, list[str]], dra: bool = True) -> RunningKueue: ...

    def stop_kueue(self, kube: Kube, running: RunningKueue) -> None: ...
