"""Integration tests run against real embedded clusters (built from Go modules on first use)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from dra_harness.components import background
from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.kube import rest
from dra_harness.providers.embedded.cluster import ClusterSpec, LocalCluster
from dra_harness.providers.embedded.provider import EmbeddedProvider, local_hardware
from dra_harness.providers.handle import ClusterHandle
from dra_harness.providers.profiles import by_name
from dra_harness.options import RunConfig
from tests.integration.spares import Spares

#: Modules whose components selftest builds in the background (:mod:`dra_harness.components.background`),
#: in the order it builds them: they run last, so that on an empty cache the build overlaps the other tests.
LAST = ("test_kueue", "test_contention_queue", "test_canary", "test_upgrade", "test_kind_real", "test_nvidia_driver_emulated",
        "test_upgrade_check_releases")


#: The longest modules (several minutes each on one worker) start first: the workers take modules in
#: collection order, and one of these started last kept the others idle for minutes.
FIRST = ("test_suites_pass", "test_contention_existing", "test_staging_twin", "test_twin_shapes", "test_twin_managed")

#: The longest of LAST (8 and 6 min on one worker), started with FIRST when nothing builds behind the tests:
#: started last, the kind module kept the other worker idle for the last 2.5 min of a warm CI run (98c8968's),
#: and first of LAST, the upgrade module left it idle 1.3 min (3b67ce9's). Short modules last fill the gaps.
LONGEST_LAST = ("test_kind_real", "test_upgrade")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    warm = os.environ.get(background.BUILDING_ENV) == "0"  # selftest's word, the same for every worker
    first = FIRST + LONGEST_LAST if warm else FIRST

    def rank(item: pytest.Item) -> int:
        stem = item.path.stem if item.path.parent == here else ""
        if stem in first:
            return -len(first) + first.index(stem)
        return LAST.index(stem) + 1 if stem in LAST else 0
    items.sort(key=rank)  # stable: every other test keeps its place


@pytest.fixture(scope="session")
def binaries() -> dict[str, str]:
    built = builder.build_all(catalog.for_cluster(), quiet=True)
    return {name: str(b.binary(name)) for b in built.values() for name in b.component.binaries}


@pytest.fixture(scope="session")
def spares(binaries, tmp_path_factory):
    """This worker's spare small cluster (:mod:`.spares`), its first one starting now."""
    s = Spares(tmp_path_factory.mktemp("spares"))
    s.start()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def small_cluster(spares):
    """A private 2-node x 2-device cluster for tests that break or tear down what they use."""
    cluster = spares.take()
    spares.start()  # the next test's, while this one runs
    try:
        yield cluster
    finally:
        spares.give_back(cluster)


@pytest.fixture
def handle(small_cluster):
    """The suites' view of ``small_cluster`` (example profile), with a namespace ``controls``."""
    h = ClusterHandle(EmbeddedProvider(RunConfig(cluster_name=small_cluster.name), "controls"), small_cluster.kube(), small_cluster.kubeconfig, "controls",
                      local_hardware(small_cluster.state().spec), by_name("example"))
    h.kube.create(rest.NAMESPACES, {"metadata": {"name": "controls"}})
    return h


REAL_NODE = "real-node-0"
REAL_CLUSTER_GPUS = 4


@pytest.fixture(scope="module")
def real_cluster():
    """A module's own cluster with one real node (the module skips where real nodes cannot run)."""
    name = f"it-real-{uuid.uuid4().hex[:6]}"
    cluster = LocalCluster(name)
    spec = ClusterSpec(name=name, nodes=1, gpus_per_node=REAL_CLUSTER_GPUS, real_nodes=1, owner_pid=os.getpid())
    state = cluster.up(spec, timeout=240)
    print(f"real node: containerd+images {state.timings[f'{REAL_NODE}_containerd_ready']:.1f}s, "
          f"cluster with real node Ready {state.timings['nodes_ready']:.1f}s, up {state.timings['up']:.1f}s")
    try:
        yield cluster
    finally:
        cluster.down()
