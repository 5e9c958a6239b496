"""What the real-node plumbing needs of a cluster: its name and paths, its state, its processes, its API.

:class:`~dra_harness.providers.embedded.cluster.LocalCluster` is that and more (drivers, readiness,
upgrades). :mod:`.realcluster`'s functions take this protocol rather than the class, so the module the
cluster calls does not import the cluster back (the type-only circle #37 named).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from dra_harness.host.processes import Supervisor
from dra_harness.kube.rest import Kube
from dra_harness.providers.embedded.state import ClusterState


class ClusterCore(Protocol):
    name: str
    state_dir: Path
    supervisor: Supervisor

    @property
    def runtime_dir(self) -> Path: ...

    def state(self) -> ClusterState | None: ...

    def kube(self) -> Kube: ...

    def start_driver(self, node: str) -> None: ...
