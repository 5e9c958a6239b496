"""What an embedded cluster was asked to be (spec) and what was started for it (state).

Saved as ``cluster.json`` in the cluster's state directory, so that any later process
(``cluster down``, a provider action, the watchdog) can act on the same cluster. Plain data, outside
the provider that starts the cluster: the commands that drive one (``cluster``, ``upgrade``, ``bench``)
read and write it through :mod:`dra_harness.providers.local` without importing that provider.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from dra_harness.components import catalog

DEFAULT_NAME = "dra-harness"
#: How a DaemonSet of the driver's kubelet plugin rolls to a new release (``upgrade --driver-daemonset``):
#: a new pod beside the old one, or the old one gone first.
DRIVER_DAEMONSET_STRATEGIES = {"surge": {"maxSurge": 1, "maxUnavailable": 0}, "replace": {"maxSurge": 0, "maxUnavailable": 1}}

@dataclass
class ClusterSpec:
    name: str = DEFAULT_NAME
    nodes: int = 4
    gpus_per_node: int = 8
    k8s_version: str = catalog.DEFAULT_KUBERNETES_VERSION
    #: pid whose death tears the cluster down (a test run); None for `cluster up`.
    owner_pid: int | None = None
    #: nodes with a real kubelet and containerd beside the simulated ones.
    real_nodes: int = 0
    #: The example driver's release its plugins start at.
    driver_version: str = catalog.EXAMPLE_DRIVER_VERSION
    #: PodSecurity level enforced on namespaces that set none ("": the API server's default, privileged);
    #: a hardened staging cluster's default, for the staging twins.
    pod_security: str = ""
    #: Whose DRA driver every node runs: ``example`` (the SIGs example driver) or ``nvidia`` (NVIDIA's, over
    #: emulated GPUs of ``gpu_profile``, :data:`dra_harness.components.nvml.PROFILES`, at ``nvidia_version``).
    driver: str = "example"
    nvidia_version: str = catalog.NVIDIA_DRIVER_VERSIONS[0]
    gpu_profile: str = "h100"

    @property
    def driver_name(self) -> str:
        return "gpu.nvidia.com" if self.driver == "nvidia" else "gpu.example.com"

    def node_names(self) -> list[str]:
        """The simulated (KWOK) nodes."""
        return [f"gpu-node-{i}" for i in range(self.nodes)]

    def real_node_names(self) -> list[str]:
        return [f"real-node-{i}" for i in range(self.real_nodes)]

    def all_node_names(self) -> list[str]:
        return self.node_names() + self.real_node_names()


@dataclass
class ClusterState:
    spec: ClusterSpec
    ports: dict[str, int]
    binaries: dict[str, str]
    #: The private short directory for sockets and real nodes (``runtime_dirs.create``), mode 0700.
    runtime_dir: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    created: float = field(default_factory=time.time)
    #: Processes swapped in place to another release (``dra-harness upgrade``): process name ->
    #: ``{"version": ..., "binary": ...}``. The others run ``spec.k8s_version`` and ``binaries``.
    swapped: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Nodes whose driver is a DaemonSet's pod (``driver_daemonset``), not a process of ours: their
    #: kubelet starts it, and a restart or swap of the process would start a second driver.
    driver_pods: list[str] = field(default_factory=list)
    #: Nodes whose driver runs in a configuration other than ``default`` (:mod:`..driver_configs`), by name.
    driver_configs: dict[str, str] = field(default_factory=dict)
    #: Nodes whose driver is NVIDIA's plugin over emulated GPUs (:mod:`..nvidia_driver`), not the example
    #: driver: node -> {version, profile, plugin, hook, root} (the release, the GPUs, its binaries, its driver root).
    nvidia: dict[str, dict[str, str]] = field(default_factory=dict)

    def version_of(self, process: str) -> str:
        """The Kubernetes release ``process`` runs (its flags and feature gates are that release's)."""
        return self.swapped.get(process, {}).get("version", self.spec.k8s_version)

    def driver_version_of(self, node: str) -> str:
        return self.swapped.get(f"driver-{node}", {}).get("version", self.spec.driver_version)

    def binary_of(self, process: str, binary: str) -> str:
        return self.swapped.get(process, {}).get("binary", self.binaries[binary])

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"
