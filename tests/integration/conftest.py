"""Integration tests run against real embedded clusters (built from Go modules on first use)."""

from __future__ import annotations

import pytest

from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.local.cluster import ClusterSpec, LocalCluster


@pytest.fixture(scope="session")
def binaries() -> dict[str, str]:
    built = builder.build_all(catalog.for_cluster(), quiet=True)
    return {name: str(b.binary(name)) for b in built.values() for name in b.component.binaries}


@pytest.fixture
def small_cluster(request, binaries, tmp_path_factory):
    """A private 2-node x 2-device cluster for tests that break or tear down what they use."""
    name = f"it-{request.node.name[:20].lower().replace('_', '-')}-{id(request) % 10000}"
    cluster = LocalCluster(name)
    cluster.up(ClusterSpec(name=name, nodes=2, gpus_per_node=2, owner_pid=__import__("os").getpid()))
    try:
        yield cluster
    finally:
        cluster.down()
