"""``--cluster=kind`` in the pytest plugin: which kind cluster a run uses, and what happens to it at the end.

A run without ``--cluster-name`` creates its own kind cluster (``dra-run-<run id>``)
and deletes it at the end; with ``--cluster-name`` it uses (or creates) that cluster
and leaves it running, deleting only the objects the run created. Either way the
kubeconfig goes through the same code path as ``--cluster=existing``.
"""

from __future__ import annotations

import dataclasses
import sys
import time

import pytest

from dra_harness.providers.handle import ClusterHandle, open_existing
from dra_harness.components import catalog
from dra_harness.providers.kind import provider


def cluster_name(config: pytest.Config, run_id: str) -> str:
    return config.getoption("--cluster-name") or f"dra-run-{run_id}"[:40]


def owns_cluster(config: pytest.Config) -> bool:
    return not config.getoption("--cluster-name")


def check_inputs(config: pytest.Config) -> None:
    """One-line usage errors before anything is created (Docker engine, kind, helm)."""
    try:
        provider.check_prerequisites(config.getoption("--kind-install"))
    except provider.KindError as e:
        raise pytest.UsageError(str(e)) from None


def spec(config: pytest.Config, run_id: str) -> provider.KindSpec:
    opt = config.getoption
    return provider.KindSpec(
        name=cluster_name(config, run_id),
        k8s_version=opt("--k8s-version") or catalog.DEFAULT_KUBERNETES_VERSION,
        workers=opt("--nodes"),
        gpus_per_node=opt("--gpus-per-node"),
        node_image=opt("--kind-node-image"),
        driver_image=opt("--driver-image") or provider.LOCAL_DRIVER_IMAGE,
        install=opt("--kind-install"),
    )


def open_kind(config: pytest.Config, run_id: str) -> ClusterHandle:
    """Bring the cluster up once; later callers (xdist workers, a cluster made by ``cluster up``) reuse it."""
    started = time.monotonic()
    name = cluster_name(config, run_id)
    kubeconfig = provider.kubeconfig_path(name)
    if not provider.is_ready(name):
        kubeconfig = provider.up(spec(config, run_id))
    handle = open_existing(str(kubeconfig), None, run_id, config.getoption("--expected-hardware"), config.getoption("--driver"))
    handle = dataclasses.replace(handle, provider="kind")
    handle.notes.append(f"kind cluster {name} ready in {time.monotonic() - started:.0f}s")
    return handle


def kubeconfig(config: pytest.Config, run_id: str) -> str:
    return str(provider.kubeconfig_path(cluster_name(config, run_id)))


def finish(config: pytest.Config, run_id: str) -> None:
    """Delete the run's own kind cluster (a named one is left running)."""
    if owns_cluster(config):
        try:
            provider.down(cluster_name(config, run_id))
        except provider.KindError as e:
            sys.stderr.write(f"dra-harness: could not delete kind cluster {cluster_name(config, run_id)}: {e}\n")
