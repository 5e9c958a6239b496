"""``--cluster=kind``: a kind cluster as a provider.

A run without ``--cluster-name`` creates its own kind cluster (``dra-run-<run id>``)
and deletes it at the end; with ``--cluster-name`` it uses (or creates) that cluster
and leaves it running, deleting only the objects the run created. Either way the
kubeconfig goes through the same code path as ``--cluster=existing``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rich.console import Console

from dra_harness.components import catalog
from dra_harness.errors import InputError
from dra_harness.kube.client import connect
from dra_harness.kube.rest import Kube
from dra_harness.providers.base import FingerprintSources, Provider, StandaloneSpec
from dra_harness.providers.existing import open_kubeconfig
from dra_harness.providers.handle import ClusterHandle
from dra_harness.providers.kind import provider


class KindProvider(Provider):
    name = "kind"
    standalone = True

    @classmethod
    def up_standalone(cls, spec: StandaloneSpec, console: Console) -> Path:
        from dra_harness.providers.kind.commands import up_kind

        return up_kind(spec.name, spec.nodes, spec.gpus_per_node, spec.k8s_version, spec.timeout, spec.node_image,
                       spec.driver_image, spec.install, console)

    @classmethod
    def down_standalone(cls, name: str, every: bool, console: Console) -> None:
        from dra_harness.providers.kind.commands import down_kind

        down_kind(name, console)

    @property
    def cluster_name(self) -> str:
        return self.options.get("cluster_name") or f"dra-run-{self.run_id}"[:40]

    @property
    def outlives_run(self) -> bool:
        return bool(self.options.get("cluster_name"))

    def check_inputs(self) -> None:
        """One-line usage errors before anything is created (Docker engine, kind, helm)."""
        try:
            provider.check_prerequisites(self.options.get("kind_install", "auto"))
        except provider.KindError as e:
            raise InputError(str(e)) from None

    def spec(self) -> provider.KindSpec:
        opt = self.options
        return provider.KindSpec(
            name=self.cluster_name,
            k8s_version=opt.get("k8s_version") or catalog.DEFAULT_KUBERNETES_VERSION,
            workers=opt.get("nodes", 4),
            gpus_per_node=opt.get("gpus_per_node", 8),
            node_image=opt.get("kind_node_image"),
            driver_image=opt.get("driver_image") or provider.LOCAL_DRIVER_IMAGE,
            install=opt.get("kind_install", "auto"),
        )

    def open(self, owner_pid: int) -> ClusterHandle:
        """Bring the cluster up once; later callers (xdist workers, a cluster made by ``cluster up``) reuse it."""
        started = time.monotonic()
        kubeconfig = provider.kubeconfig_path(self.cluster_name)
        if not provider.is_ready(self.cluster_name):
            kubeconfig = provider.up(self.spec())
        handle = open_kubeconfig(self, str(kubeconfig), None)
        handle.notes.append(f"kind cluster {self.cluster_name} ready in {time.monotonic() - started:.0f}s")
        return handle

    def connect(self) -> Kube:
        return connect(str(provider.kubeconfig_path(self.cluster_name)))

    def close(self) -> None:
        """Delete the run's own kind cluster (a named one is left running)."""
        if self.outlives_run:
            return
        try:
            provider.down(self.cluster_name)
        except provider.KindError as e:
            sys.stderr.write(f"dra-harness: could not delete kind cluster {self.cluster_name}: {e}\n")

    def fingerprint_sources(self) -> FingerprintSources | str:
        # The plugin creates the run's kind cluster inside the test session and deletes it at its end.
        return "the run's kind cluster exists only inside the test session"

