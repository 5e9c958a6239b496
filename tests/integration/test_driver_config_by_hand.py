"""Upstream's demos by hand: a cluster started with the example driver in a configuration, and switched back.

``cluster up --driver-config multiple-allocations`` starts every node's driver the way the demo's README
installs the chart (``gpuAllowMultipleAllocations=true``); the demo's manifest is applied verbatim with the
cluster's kubectl, and upstream's expectation holds: two pods' claims each consume 16Gi and 20 compute of
one and the same GPU. ``cluster driver-config default`` switches back and the status says so; the same
manifest then gives each pod a GPU of its own (the negative control: the check tells the two apart).
Names that do not combine are refused in one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from dra_harness.components import catalog
from dra_harness.components.gomod import module_source
from dra_harness.kube import rest
from dra_harness.kube.waits import watch_until
from dra_harness.providers.embedded.cluster import LocalCluster

pytestmark = pytest.mark.cluster
CLI = [sys.executable, "-m", "dra_harness.cli"]
DEMO = "demo/examples/gpu-allow-multiple-allocations/gpu-allow-multiple-allocations.yaml"
NAMESPACE = "gpu-allow-multiple-allocations"  # the manifest's own


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def by_hand() -> Iterator[LocalCluster]:
    name = f"hand-{uuid.uuid4().hex[:6]}"
    up = _cli("cluster", "up", "--name", name, "--nodes", "1", "--gpus-per-node", "2", "--real-nodes", "0",
              "--driver-config", "multiple-allocations")
    try:
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-3000:]
        assert "as multiple-allocations" in up.stderr, up.stderr[-2000:]
        yield LocalCluster(name)
    finally:
        _cli("cluster", "down", "--name", name)


def _apply_demo(cluster: LocalCluster, verb: str) -> None:
    manifest = module_source(catalog.EXAMPLE_DRIVER) / DEMO
    kubectl = cluster.state().binaries["kubectl"]
    done = subprocess.run([kubectl, "--kubeconfig", str(cluster.kubeconfig), verb, "-f", str(manifest)]
                          + (["--wait"] if verb == "delete" else []), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def _shared(cluster: LocalCluster) -> list[tuple[str, str]]:
    """The demo's two claims once both are allocated and their pods Running: (device, memory consumed) each."""
    kube = cluster.kube()
    watch_until(kube, rest.PODS, lambda ps: len(ps) == 2 and all(p["status"].get("phase") == "Running" for p in ps),
                60, "the demo's two pods Running", namespace=NAMESPACE)
    out = []
    for claim in sorted(kube.list(rest.RESOURCE_CLAIMS, NAMESPACE), key=lambda c: c["metadata"]["name"]):
        result = claim["status"]["allocation"]["devices"]["results"][0]
        out.append((result["device"], (result.get("consumedCapacity") or {}).get("memory", "")))
    return out


def _drivers(cluster: LocalCluster) -> dict[str, str]:
    status = _cli("cluster", "status", "--name", cluster.name, "--json")
    assert status.returncode == 0, status.stderr
    return json.loads(status.stdout)["drivers"]


def test_an_upstream_demo_applied_by_hand_works_on_a_cluster_started_in_its_configuration(by_hand):
    assert all("configuration multiple-allocations" in d for d in _drivers(by_hand).values()), _drivers(by_hand)
    _apply_demo(by_hand, "apply")
    try:
        (dev0, mem0), (dev1, mem1) = _shared(by_hand)
        assert dev0 == dev1 and mem0 == mem1 == "16Gi", (dev0, mem0, dev1, mem1)  # one GPU, 16Gi to each
    finally:
        _apply_demo(by_hand, "delete")


def test_negative_control_switched_back_to_default_each_pod_gets_a_gpu_of_its_own(by_hand):
    switched = _cli("cluster", "driver-config", "default", "--name", by_hand.name)
    assert switched.returncode == 0, switched.stderr[-2000:]
    assert all("configuration default" in d for d in _drivers(by_hand).values()), _drivers(by_hand)
    _apply_demo(by_hand, "apply")
    try:
        (dev0, _), (dev1, _) = _shared(by_hand)
        assert dev0 != dev1, (dev0, dev1)
    finally:
        _apply_demo(by_hand, "delete")


def test_configurations_that_do_not_combine_are_refused_in_one_line(by_hand):
    refused = _cli("cluster", "driver-config", "multiple-allocations", "net", "--name", by_hand.name)
    assert refused.returncode == 2, refused
    assert refused.stderr.strip().count("\n") == 0 and "do not combine" in refused.stderr, refused.stderr
    unknown = _cli("cluster", "driver-config", "partitions-4", "--node", "no-such-node", "--name", by_hand.name)
    assert unknown.returncode == 2 and "--node no-such-node" in unknown.stderr, unknown.stderr
