"""The provider protocol: where the cluster under test comes from, and what the harness may do to it there.

Why a protocol: the plugin, the runner and the disruption actions used to ask *which*
provider they had ("local"? "kind"?) and then guess what it could do. They now ask the
provider what it can do (:attr:`Provider.outlives_run`, :attr:`Provider.controls_driver`,
:attr:`Provider.simulates_nodes`) and let it act. One implementation per kind of cluster:
:mod:`.embedded`, :mod:`.kind` and :mod:`.existing`; the registry in :mod:`dra_harness.providers`
maps ``--cluster`` names to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.console import Console

from dra_harness.errors import InputError
from dra_harness.providers.abilities import FingerprintSources
from dra_harness.kube.rest import Kube
from dra_harness.providers.handle import ClusterHandle

if TYPE_CHECKING:
    from dra_harness.options import RunConfig
    from dra_harness.providers.local import LocalClusterApi



@dataclass(frozen=True)
class StandaloneSpec:
    """What ``dra-harness cluster up`` asks of a provider that can start a cluster on its own."""

    name: str
    nodes: int
    gpus_per_node: int
    k8s_version: str
    timeout: float
    real_nodes: int | None = None  # embedded: None = 1 where possible
    node_image: str | None = None  # kind
    driver_image: str | None = None  # kind
    install: str = "auto"  # kind
    driver: str = "example"  # example, or nvidia (NVIDIA's driver on emulated GPUs)
    helm_args: tuple[str, ...] = ()  # kind: the user's --values/--set for the driver's chart


class Provider:
    """One kind of cluster. Built from the run's :class:`~dra_harness.options.RunConfig`."""

    name: ClassVar[str]
    #: The harness itself starts and stops the driver's kubelet-plugin processes. Elsewhere a
    #: DaemonSet replaces a stopped driver within seconds, so a driver cannot be held down.
    controls_driver: ClassVar[bool] = False
    #: ``run`` gives this provider's new cluster a real kubelet node where the host can run one (``--real-nodes``).
    starts_real_nodes: ClassVar[bool] = False
    #: The harness runs every process of this cluster itself, and nothing but its runs lives there:
    #: disruptive tests need no ``--allow-disruptive`` and the run needs no per-namespace role.
    harness_operated: ClassVar[bool] = False
    #: The cluster runs simulated (KWOK) nodes the harness may add to.
    simulates_nodes: ClassVar[bool] = False
    #: An image every node of this cluster already has, with a shell, for container-level checks.
    workload_image: ClassVar[str | None] = None

    @property
    def nvml_probe_image(self) -> str | None:
        """An image with Python and nvidia-ml-py the nodes have, for the GPU-visibility checks without ``--probe-image``."""
        return None

    def gpu_settings_applied(self, node: str) -> list[str] | None:
        """The nvidia-smi settings NVIDIA's driver applied to ``node``'s GPUs, where the harness emulates them;
        None where nobody can read them back (real GPUs: NVML has no call that reports a time-slice)."""
        return None

    #: ``dra-harness cluster up/down --provider NAME`` starts and removes clusters of this kind.
    standalone: ClassVar[bool] = False

    @classmethod
    def up_standalone(cls, spec: StandaloneSpec, console: Console) -> Path:
        """Start a cluster outside any run; returns its kubeconfig."""
        raise NotImplementedError(f"the {cls.name} provider does not start clusters")

    @classmethod
    def down_standalone(cls, name: str, every: bool, console: Console) -> None:
        """Remove a cluster started by :meth:`up_standalone` (``every``: all of this user's)."""
        raise NotImplementedError(f"the {cls.name} provider does not remove clusters")

    @classmethod
    def local_cluster(cls, name: str) -> LocalClusterApi | None:
        """A cluster of this provider's whose processes run on this machine, by name, for the commands that
        drive one in place (:mod:`dra_harness.providers.local`); None: this provider runs none here."""
        return None

    @classmethod
    def configure_standalone(cls, name: str, configs: tuple[str, ...], nodes: tuple[str, ...], timeout: float,
                             console: Console) -> None:
        """Restart the driver of a cluster started by :meth:`up_standalone` in the configuration ``configs`` make
        (:func:`dra_harness.providers.driver_configs.combined`) on ``nodes`` (all: every node), returning once
        each node's slices show it."""
        raise InputError(f"--provider {cls.name}: the harness does not restart this provider's driver in another "
                         f"configuration (the embedded cluster's, --provider local, it does)")

    def __init__(self, config: RunConfig, run_id: str) -> None:
        self.config = config
        self.run_id = run_id

    @property
    def outlives_run(self) -> bool:
        """The cluster was there before the run or stays after it. Then the run deletes exactly
        the objects it made and takes turns with other runs through Leases."""
        return True

    def check_inputs(self) -> None:
        """Raise a one-line error for an option this provider cannot work with, before anything starts."""

    def kube_before_run(self) -> Kube | None:
        """API access to the cluster when it is there before the run (a run id must then be new on it,
        :func:`dra_harness.providers.sweep.refuse_reused_run_id`); None where the run brings its cluster up."""
        return self.connect() if self.outlives_run else None

    def prepare(self, console: Console) -> None:
        """Bring the cluster up before the test session, where its progress shows (a session would hide it)."""

    def open(self, owner_pid: int) -> ClusterHandle:
        """The handle the suites use; called once per process of the run, under the run's cluster lock."""
        raise NotImplementedError

    def connect(self) -> Kube:
        """API access for the end-of-run sweep (the handle may be gone by then)."""
        raise NotImplementedError

    def close(self) -> None:
        """End of run: remove what exists only for this run (its own cluster). Objects the run made
        on a cluster that outlives it are swept by the caller."""

    def watchdog_target(self) -> tuple[str | None, str | None] | None:
        """(kubeconfig, context) on which a watchdog sweeps the run if its process is killed outright;
        None when the cluster itself goes with the run."""
        return None

    def fingerprint_sources(self) -> FingerprintSources | str:
        """What the fingerprint reads, or why the cluster cannot be fingerprinted before the session."""
        raise NotImplementedError

    # -- driver actions (only where :attr:`controls_driver`) -------------------------------------
    def stop_driver(self, node: str, kill: bool) -> None:
        raise NotImplementedError(f"the {self.name} provider does not run the driver itself")

    def start_driver(self, node: str) -> None:
        raise NotImplementedError(f"the {self.name} provider does not run the driver itself")

    def configure_driver(self, node: str, config: str) -> None:
        """Restart ``node``'s driver in a configuration of :mod:`dra_harness.providers.driver_configs`."""
        raise NotImplementedError(f"the {self.name} provider does not run the driver itself")

    def start_driver_webhook(self, namespace: str, run_id: str) -> str:
        """Run the driver's validating webhook for claims in ``namespace``; returns its configuration's name."""
        raise NotImplementedError(f"the {self.name} provider does not run the driver itself")

    def stop_driver_webhook(self, name: str) -> None:
        raise NotImplementedError(f"the {self.name} provider does not run the driver itself")

    def driver_log(self, node: str, lines: int) -> str:
        """The last lines of the driver process's log on ``node`` (where the harness runs it)."""
        return ""

    def driver_running(self, node: str) -> bool | None:
        """Whether the driver process the harness runs on ``node`` is alive; None where it runs none."""
        return None

    def cdi_dir(self, node: str) -> Path | None:
        """Where the driver on ``node`` writes its CDI specs, when the harness can read that node's files
        (the embedded cluster's real nodes); None elsewhere."""
        return None
