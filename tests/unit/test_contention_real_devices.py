"""Contention on a cluster's own devices: what the labelled nodes offer becomes the scenario's shape and designs."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_harness.contention.floor import MARGIN
from dra_harness.contention.real_devices import RealDevices
from dra_harness.contention.scenario import ScenarioError, load
from dra_harness.kube import rest
from dra_harness.labels import CONTENTION_ALLOWED_LABEL

SCENARIO = Path(__file__).resolve().parents[2] / "fixtures" / "contention" / "real" / "one-node.yaml"


class Cluster:
    """The two lists RealDevices reads, as plain data."""

    def __init__(self, nodes: dict[str, dict[str, str]], devices: dict[str, int], driver: str = "gpu.example.com") -> None:
        self.nodes = [{"metadata": {"name": n, "labels": labels}} for n, labels in nodes.items()]
        self.slices = [{"spec": {"driver": driver, "nodeName": n, "devices": [
            {"name": f"gpu-{i}", "attributes": {"uuid": {"string": f"{n}-uuid-{i}"}}} for i in range(count)]}}
            for n, count in devices.items()]

    def list(self, res, namespace=None, label_selector=None):
        if res is rest.NODES:
            key, _, value = (label_selector or "").partition("=")
            return [n for n in self.nodes if n["metadata"]["labels"].get(key) == value]
        return self.slices


ALLOWED = {CONTENTION_ALLOWED_LABEL: "true"}


def test_the_labelled_nodes_devices_replace_the_scenarios_shape_and_unlabelled_nodes_are_ignored():
    kube = Cluster({"a": ALLOWED, "b": {}}, {"a": 4, "b": 8})
    topo = RealDevices(kube, load(SCENARIO), "run1", "busybox", "gpu.example.com")
    assert [f"{d.node}/{d.name}" for d in topo.devices] == ["a/gpu-0", "a/gpu-1", "a/gpu-2", "a/gpu-3"]
    assert (topo.scenario.nodes, topo.scenario.devices_per_node) == (1, 4)


def test_the_reserved_design_names_its_devices_by_identity():
    topo = RealDevices(Cluster({"a": ALLOWED}, {"a": 4}), load(SCENARIO), "run1", "busybox", "gpu.example.com")
    attr = "device.attributes['gpu.example.com'].uuid"
    assert topo.selector("reserved", "inference") == (
        f"device.driver == 'gpu.example.com' && (!({attr} in [\"a-uuid-0\"]) || {attr} in [\"a-uuid-0\"])")
    assert topo.selector("reserved", "training") == f"device.driver == 'gpu.example.com' && (!({attr} in [\"a-uuid-0\"]))"
    assert topo.probe_selector("training", "a").endswith('["a-uuid-0", "a-uuid-1", "a-uuid-2", "a-uuid-3"]')


def test_a_job_is_a_sleeping_container_kept_to_the_labelled_nodes():
    topo = RealDevices(Cluster({"a": ALLOWED}, {"a": 4}), load(SCENARIO), "run1", "busybox", "gpu.example.com")
    spec = topo.pod("reserved", "inference-0", "inference", 24.0)["spec"]
    assert spec["containers"][0]["command"] == ["sleep", "24.000"] and spec["containers"][0]["image"] == "busybox"
    assert spec["nodeSelector"] == ALLOWED and spec["restartPolicy"] == "Never"
    assert "dra-harness.io/run-duration" not in str(topo.pod("reserved", "x", "inference", 1.0)["metadata"])


def test_the_compression_is_lowered_to_twenty_floors_of_the_shortest_tolerable_wait():
    topo = RealDevices(Cluster({"a": ALLOWED}, {"a": 4}), load(SCENARIO), "run1", "busybox", "gpu.example.com")
    chosen = topo.adapt_compression([1.0] * 10 + [2.0] * 10)  # p95 2 s: 600 s / (20 x 2 s)
    assert chosen == 600 / (MARGIN * 2.0) == 15.0
    assert topo.adapt_compression([0.01] * 20) == pytest.approx(chosen)  # never raised again above the last choice


@pytest.mark.parametrize(("nodes", "devices", "message"), [
    ({"a": {}}, {"a": 4}, f"no node is labelled {CONTENTION_ALLOWED_LABEL}=true"),
    ({"a": ALLOWED}, {}, "driver gpu.example.com publishes no device on the labelled nodes a"),
    ({"a": ALLOWED, "b": ALLOWED}, {"a": 4, "b": 2}, 'different numbers of gpu.example.com devices ({"a": 4, "b": 2})'),
    ({"a": ALLOWED}, {"a": 1}, "tier training takes 2 devices; the labelled nodes have 1 each"),
])
def test_a_cluster_that_cannot_run_the_scenario_is_one_line_naming_why(nodes, devices, message):
    with pytest.raises(ScenarioError) as e:
        RealDevices(Cluster(nodes, devices), load(SCENARIO), "run1", "busybox", "gpu.example.com")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_pools_without_a_node_group_label_are_not_offered_and_say_why(tmp_path):
    text = SCENARIO.read_text().replace("cluster: {nodes: 1, devices_per_node: 4}",
                                        "cluster: {nodes: 2, devices_per_node: 4, node_groups: [{name: x, nodes: 1, tiers: [inference]}, {name: y, nodes: 1, tiers: [training]}]}")
    text = text.replace("designs: {shared: {}", "designs: {pools: {}, shared: {}")
    (tmp_path / "s.yaml").write_text(text)
    kube = Cluster({"a": {**ALLOWED, "pool": "x"}, "b": {**ALLOWED, "pool": "y"}}, {"a": 4, "b": 4})
    topo = RealDevices(kube, load(tmp_path / "s.yaml"), "run1", "busybox", "gpu.example.com")
    assert "real_devices.node_group_label" in topo.unsupported["pools"]
    (tmp_path / "s.yaml").write_text(text.replace("identity: uuid}", "identity: uuid, node_group_label: pool}"))
    topo = RealDevices(kube, load(tmp_path / "s.yaml"), "run1", "busybox", "gpu.example.com")
    assert not topo.unsupported
    affinity = topo.pod("pools", "j", "inference", 1.0)["spec"]["affinity"]["nodeAffinity"]
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "pool", "operator": "In", "values": ["x"]}]
    assert [g.nodes for g in topo.scenario.node_groups] == [1, 1]
