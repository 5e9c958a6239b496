"""Replicas on different hardware: ``firstAvailable`` over two models lets one Deployment's pods differ.

"Different Pods in the same ReplicaSet may receive different device types": a claim template
that prefers model A and falls back to model B is satisfied per node, so when A runs out the
rest of the replicas get B, and nothing in the Deployment's status says so. The harness's
allocation table (:mod:`dra_harness.report.allocations`: pod → claim → device → model, written
for every test and shown in the report) must show each replica's model and raise a finding
for the workload. On two simulated nodes (:mod:`dra_harness.topology.fleet`), one per model,
2 GPUs each: 3 replicas cannot all get A. The same table for replicas that all asked for A
raises nothing, so the finding comes from the models, not from there being replicas.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dra_harness.kube import builders, rest
from dra_harness.kube.waits import watch_until
from dra_harness.plugin.simulated import on_simulated_nodes
from dra_harness.report import allocations
from dra_harness.topology.fleet import TopologyFleet

pytestmark = [pytest.mark.concern("replicas", "Replicas on different hardware"), pytest.mark.exclusive]  # simulated nodes must not meet other suites' node audits
MODELS = ("SIM-A", "SIM-B")


@pytest.fixture
def fleet(request: pytest.FixtureRequest, cluster, run_id: str) -> Iterator[TopologyFleet]:
    fl = TopologyFleet(cluster.kube, run_id, models=MODELS, gpus=2)
    with on_simulated_nodes(request.config, cluster, fl, "the replicas suite"):
        yield fl


def _deploy(cluster, fleet: TopologyFleet, namespace: str, name: str, replicas: int, models: tuple[str, ...]) -> list[dict]:
    """A Deployment of ``replicas`` whose template asks for one GPU of the first of ``models`` that fits."""
    request = (builders.first_available("gpu", [builders.exactly(m.lower(), fleet.model_class(m)) for m in models])
               if len(models) > 1 else builders.exactly("gpu", fleet.model_class(models[0])))
    cluster.kube.create(rest.RESOURCE_CLAIM_TEMPLATES, builders.claim_template(name, cluster.run_id, [request]), namespace)
    pod = fleet.pod(name, name)
    labels = {"app": name, **pod["metadata"]["labels"]}
    cluster.kube.create(rest.DEPLOYMENTS, {"metadata": {"name": name, "labels": pod["metadata"]["labels"]}, "spec": {
        "replicas": replicas, "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": labels}, "spec": pod["spec"]}}}, namespace)
    return watch_until(cluster.kube, rest.PODS,
                       lambda ps: sum(p.get("status", {}).get("phase") == "Running" for p in ps) == replicas,
                       90, f"{replicas} replicas of {name} to run", namespace=namespace, label_selector=f"app={name}")


def test_replicas_that_fell_back_to_another_model_are_found_with_each_replicas_model(cluster, fleet, namespace, evidence):
    _deploy(cluster, fleet, namespace, "web", 3, MODELS)
    rows = allocations.collect(cluster.kube, namespace)
    table = {r["pod"]: (r["node"], allocations.pod_models(r)) for r in rows}
    found = allocations.mixed(rows)
    evidence.record(table={p: f"{n}: {', '.join(m)}" for p, (n, m) in sorted(table.items())},
                    mixed=[f["message"] for f in found])  # the report raises it as a finding from the table
    assert len(rows) == 3 and all(r["workload"] == "Deployment/web" for r in rows), rows
    counts = {m: sum(ms == [m] for _, ms in table.values()) for m in MODELS}
    assert counts == {"SIM-A": 2, "SIM-B": 1}, f"2 nodes x 2 GPUs, A preferred: expected A A B, got {table}"
    assert len(found) == 1 and "Deployment/web" in found[0]["message"] and "SIM-B (1" in found[0]["message"], found
    # The table says on which node each model was: the fallback replica sits on the B node.
    assert all(node == fleet.nodes[MODELS.index(ms[0])] for node, ms in table.values()), table


def test_replicas_that_all_got_the_model_they_asked_for_raise_no_finding(cluster, fleet, namespace, evidence):
    _deploy(cluster, fleet, namespace, "api", 2, MODELS[:1])
    rows = allocations.collect(cluster.kube, namespace)
    evidence.record(table={r["pod"]: allocations.pod_models(r) for r in rows})
    assert len(rows) == 2 and {m for r in rows for m in allocations.pod_models(r)} == {"SIM-A"}, rows
    assert allocations.mixed(rows) == []
    assert {r["node"] for r in rows} == {fleet.nodes[0]}
