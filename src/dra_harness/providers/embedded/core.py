"""What the parts of an embedded cluster need of it: its name and paths, its state, its processes, its API.

:class:`~dra_harness.providers.embedded.cluster.LocalCluster` is a façade over this core and parts that
own their work: the driver plugins (:mod:`.drivers`), start-up readiness (:mod:`.readiness`), real
nodes (:mod:`.realcluster`), the driver's DaemonSet (:mod:`.driver_daemonset`) and Kueue beside it
(:mod:`.kueue`). The parts take these protocols rather than the class, so the façade imports its parts
and no part imports the façade back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from dra_harness.host.processes import Supervisor
from dra_harness.kube.rest import Kube
from dra_harness.providers.embedded import commands
from dra_harness.providers.localstate import ClusterState


class ClusterCore(Protocol):
    name: str
    state_dir: Path
    supervisor: Supervisor

    @property
    def kubeconfig(self) -> Path: ...

    @property
    def runtime_dir(self) -> Path: ...

    def state(self) -> ClusterState | None: ...

    def _save(self, state: ClusterState) -> None: ...

    def paths(self) -> commands.Paths: ...

    def kube(self) -> Kube: ...

    def start_driver(self, node: str) -> None: ...


class DriverHost(ClusterCore, Protocol):
    """What the driver's DaemonSet form needs besides: the record of which node's driver is a pod's."""

    def hand_driver_to_pod(self, node: str) -> None: ...

    def record_driver_config(self, node: str, config: str) -> None: ...

    def record_swap(self, process: str, entry: dict[str, str]) -> None: ...
