"""``--cluster=kind``: a kind cluster as a provider.

A run without ``--cluster-name`` creates its own kind cluster (``dra-run-<run id>``)
and deletes it at the end; with ``--cluster-name`` it uses (or creates) that cluster
and leaves it running, deleting only the objects the run created. Either way the
kubeconfig goes through the same code path as ``--cluster=existing``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from dra_harness import heartbeat
from dra_harness.components import catalog, emulated_gpus, images
from dra_harness.components.images import WORKLOAD_IMAGE
from dra_harness.errors import InputError
from dra_harness.kube.client import connect
from dra_harness.kube.rest import Kube
from dra_harness.providers.abilities import FingerprintSources
from dra_harness.providers.base import Provider, StandaloneSpec
from dra_harness.providers.existing import open_kubeconfig
from dra_harness.providers.handle import ClusterHandle
from dra_harness.providers.kind import driver, nvidia, provider, reaper


class KindProvider(Provider):
    name = "kind"
    standalone = True
    #: Loaded into every node with the driver's image (``driver.load_images``).
    workload_image = WORKLOAD_IMAGE

    @classmethod
    def up_standalone(cls, spec: StandaloneSpec, console: Console) -> Path:
        from dra_harness.providers.kind.commands import up_kind

        return up_kind(provider.KindSpec(
            name=spec.name, k8s_version=spec.k8s_version, workers=spec.nodes, gpus_per_node=spec.gpus_per_node,
            node_image=spec.node_image, driver_image=spec.driver_image, install=spec.install, driver=spec.driver,
            helm_args=spec.helm_args,
            # A cold node image build and kind's own start-up take far longer than the embedded cluster.
            timeout=max(spec.timeout, 900.0)), console)

    @classmethod
    def down_standalone(cls, name: str, every: bool, console: Console) -> None:
        from dra_harness.providers.kind.commands import down_kind

        down_kind(name, console)

    _reaper: subprocess.Popen | None = None

    @property
    def cluster_name(self) -> str:
        return self.config.cluster_name or f"dra-run-{self.run_id}"[:40]

    @property
    def outlives_run(self) -> bool:
        return bool(self.config.cluster_name)

    @property
    def harness_operated(self) -> bool:  # type: ignore[override]
        """The run's own kind cluster holds nothing but the run; a named one may hold anything."""
        return not self.outlives_run

    def check_inputs(self) -> None:
        """One-line errors before anything is created: no way to a Docker engine, no Go to build kind and Helm."""
        try:
            provider.check_prerequisites(self.config.kind_install)
        except provider.KindError as e:
            raise InputError(str(e)) from None

    def kube_before_run(self) -> Kube | None:
        """A named kind cluster not up yet is brought up by this run: nothing of any run is there."""
        return self.connect() if self.outlives_run and provider.is_ready(self.cluster_name) else None

    def spec(self) -> provider.KindSpec:
        opt = self.config
        return provider.KindSpec(
            name=self.cluster_name,
            k8s_version=opt.k8s_version or catalog.DEFAULT_KUBERNETES_VERSION,
            workers=opt.nodes,
            gpus_per_node=opt.gpus_per_node,
            node_image=opt.kind_node_image,
            driver_image=opt.driver_image,
            install=opt.kind_install,
            driver=self.driver,
        )

    @property
    def driver(self) -> str:
        """``nvidia`` when the run asks for NVIDIA's profile (``--driver nvidia`` or ``gpu.nvidia.com``), else ``example``."""
        return "nvidia" if self.config.driver in ("nvidia", nvidia.DRIVER) else "example"

    @property
    def nvml_probe_image(self) -> str | None:
        """The NVML probe's image, imported into every node of a cluster running NVIDIA's driver."""
        return images.nvml_probe_image_name() if self.driver == "nvidia" else None

    def prepare(self, console: Console) -> None:
        """The cluster comes up before the session, where its progress shows and the fingerprint can read it."""
        if provider.is_ready(self.cluster_name):
            return
        started = time.monotonic()
        self._reap_after(os.getpid())
        with heartbeat.status(console, "kind") as status:
            provider.up(self.spec(), say=lambda s: status.update(s))
        console.print(f"kind cluster {self.cluster_name} up in {time.monotonic() - started:.0f}s")

    def open(self, owner_pid: int) -> ClusterHandle:
        """Bring the cluster up once; later callers (xdist workers, a cluster made by ``cluster up``) reuse it."""
        started = time.monotonic()
        kubeconfig = provider.kubeconfig_path(self.cluster_name)
        if not provider.is_ready(self.cluster_name):
            self._reap_after(owner_pid)
            kubeconfig = provider.up(self.spec())
        handle = open_kubeconfig(self, str(kubeconfig), None)
        handle.notes.append(f"kind cluster {self.cluster_name} ready in {time.monotonic() - started:.0f}s")
        return handle

    def _reap_after(self, owner: int) -> None:
        """The run's own cluster goes when its owner goes, even by kill -9 (a named cluster stays)."""
        if not self.outlives_run and self._reaper is None:
            self._reaper = reaper.start(owner, self.cluster_name)

    def connect(self) -> Kube:
        return connect(str(provider.kubeconfig_path(self.cluster_name)))

    def close(self) -> None:
        """Delete the run's own kind cluster (a named one is left running)."""
        if self.outlives_run:
            return
        try:
            provider.down(self.cluster_name)
            if self._reaper is not None:
                self._reaper.terminate()
        except provider.KindError as e:
            sys.stderr.write(f"dra-harness: could not delete kind cluster {self.cluster_name}: {e}\n")

    def fingerprint_sources(self) -> FingerprintSources | str:
        if not provider.is_ready(self.cluster_name):
            return f"kind cluster {self.cluster_name} is not up"
        kube = self.connect()
        facts = provider.created(self.cluster_name)
        if facts.get("driver") == "nvidia":
            publishers = driver.publishers(kube, nvidia.DRIVER, nvidia.NAMESPACE)
            build = f"{emulated_gpus.description(str(facts.get('nvidia_version')), str(facts.get('gpu_profile')))}, its Helm chart on kind"
        else:
            publishers, build = driver.publishers(kube), None
        extra = {"kind": {"cluster": self.cluster_name, "kind_version": catalog.KIND_VERSION, **facts, "publishers": publishers}}
        return kube, {"kube-apiserver": lambda: kube.raw("/metrics", timeout=20)}, build, extra

