"""Staging twins of shapes drawn from today's seed: zero FAIL, within 5 minutes, nothing of others touched.

The example driver on every twin is healthy, so a FAIL is always the harness blaming the cluster
for one of its own assumptions; "not established" with the preflight's fact is the honest answer.
Most shapes also draw a fault injected while the run goes on (clock skew between two runs, the API
server away longer than the run's lease mid-drain, pytest killed mid-drain, a storm of 429s on the run's writes from
API Priority and Fairness during its clean-up): the same judgement holds through it.
The seed changes every day and is printed: ``python -m tests.integration.twins --seed N --shapes 1``
reproduces a shape. ``DRA_HARNESS_TWIN_SEED`` pins it.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from dra_harness.kube import builders, rest
from dra_harness.labels import RUN_LABEL
from dra_harness.providers.embedded.cluster import DRIVER_NAME
from dra_harness.providers.embedded.twin import Shape
from dra_harness.report.results import read_results

from .twins import run, shapes

pytestmark = pytest.mark.cluster
SEED = int(os.environ.get("DRA_HARNESS_TWIN_SEED") or shapes.daily_seed() * 10)
#: Staging shapes a CI run draws: one a day (the managed twin draws another, test_twin_managed), so CI walks the shapes
#: over the days; three a day cost 7-9 minutes of test time. ``DRA_HARNESS_TWIN_SHAPES`` draws more.
SHAPES = int(os.environ.get("DRA_HARNESS_TWIN_SHAPES") or 1)


@pytest.mark.parametrize("seed", [SEED + i for i in range(SHAPES)])
def test_a_run_on_a_drawn_staging_shape_fails_nothing_touches_nothing_of_others_and_leaves_nothing(seed, binaries, tmp_path):
    shape = shapes.draw(seed, run.node_count(), run.GPUS)
    print(f"\nshape {shape.describe()}")
    with run.twin_cluster(shape, tmp_path / "twin") as (cluster, made):
        judgement = run.judge(cluster, made, tmp_path / "run")
    print("| seed | passed | not established | skipped | failed | minutes |")
    print(judgement.row())
    for test, why in sorted(judgement.not_established.items()):
        print(f"  not established {test}: {why[:200]}")
    assert judgement.ok, judgement.explain()


def test_a_real_fault_planted_in_a_twin_still_fails_so_not_established_cannot_swallow_it(binaries, tmp_path):
    """Negative control: a device published twice, a DeviceClass that selects nothing and one device handed to
    two pods are the product's faults."""
    shape = shapes.draw(SEED, run.node_count(), run.GPUS)
    with run.twin_cluster(shape, tmp_path / "twin") as (cluster, made):
        kube = cluster.kube()
        node = cluster.state().spec.node_names()[0]
        first = kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={DRIVER_NAME},spec.nodeName={node}")[0]
        # First alone: a class that selects nothing would leave the check's own pods unschedulable.
        _hand_one_device_to_two_pods(kube, node, first["spec"]["pool"]["name"], first["spec"]["devices"][-1]["name"])
        shared_out, _ = run.run_main_job(made, tmp_path / "shared", "-k", "never_share_a_device")
        # Selected by a node selector, not nodeName: the driver's slice controller lists only spec.nodeName=<its node>
        # and deletes a copy of its pool there 30 s after it appears (DefaultSyncDelay), which a loaded run outlasted.
        spec = {k: v for k, v in first["spec"].items() if k != "nodeName"}
        twice = {"metadata": {"name": f"{node}-twice"}, "spec": {**spec, "devices": spec["devices"][:1], "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
        kube.create(rest.RESOURCE_SLICES, twice)
        kube.patch(rest.DEVICE_CLASSES, DRIVER_NAME, {"spec": {"selectors": [
            {"cel": {"expression": f"device.driver == '{DRIVER_NAME}' && device.attributes['{DRIVER_NAME}'].index > 99"}}]}})
        out, _ = run.run_main_job(made, tmp_path / "run", "-k", "published_twice or selects_exactly")
    verdicts = {r["test"]: r["outcome"] for r in read_results(tmp_path / "run")}
    print(verdicts)
    assert verdicts.get("test_no_device_or_pool_is_published_twice") == "failed", (out.stdout + out.stderr)[-2000:]
    assert verdicts.get("test_the_device_class_selects_exactly_the_drivers_devices") == "failed", verdicts
    assert out.returncode == 1
    shared = [r for r in read_results(tmp_path / "shared") if r["test"] == "test_pods_using_templates_never_share_a_device"]
    assert shared and shared[0]["outcome"] == "failed", (shared_out.stdout + shared_out.stderr)[-2000:]
    assert "is allocated to 2 claims: tenant-planted/first, tenant-planted/second" in shared[0]["message"], shared[0]
    assert shared_out.returncode == 1


def test_the_faults_catch_the_rules_they_are_drawn_against_put_back_as_before(binaries, tmp_path):
    """Negative controls of the drawn faults, on the fixed twin: a cordon without its record on the node (as the
    harness patched it before) outlives a kill mid-drain, and a sweep that takes a 429 for an answer leaves the
    run's last namespace under the storm. (The skew's and the API server's controls are test_cluster_lock_overlap
    and test_api_server_restart: which run takes over whose Lease is a matter of timing in a whole run.)"""
    kill = dataclasses.replace(Shape(), fault="kill-mid-drain")
    with run.twin_cluster(kill, tmp_path / "twin") as (cluster, made):
        # Only the drain suite: the kill comes two seconds into its first cordon, and the suites before it would only delay that.
        cordon = run.judge(cluster, made, tmp_path / "cordon", old="cordon", extra=("-k", "node_drain"))
        print(cordon.explain())
        assert cordon.fault and not cordon.ok
        node = cordon.fault.rsplit(" cordoned ", 1)[1]
        assert f"changed: Node/{node}" in cordon.changed, cordon.explain()
        for line in cordon.changed:  # the operator undoes them (the old restore could not either: no record)
            cluster.kube().patch(rest.NODES, line.rsplit("Node/", 1)[1], {"spec": {"unschedulable": None}})
        stormy = dataclasses.replace(made, shape=dataclasses.replace(made.shape, fault="throttled-sweep"))
        sweep = run.judge(cluster, stormy, tmp_path / "sweep", old="sweep", extra=("-k", "unsatisfiable_selector"))
        print(sweep.explain())
    assert sweep.fault and not sweep.ok
    assert any(x.startswith("namespace/dra-test-an-unsatisfiable") for x in sweep.left), sweep.explain()


def _hand_one_device_to_two_pods(kube, node: str, pool: str, device: str) -> None:
    """What a faulty allocator does: two claims of another team allocated the same device, each reserved for its pod."""
    namespace = "tenant-planted"
    kube.create(rest.NAMESPACES, {"metadata": {"name": namespace}})
    for name in ("first", "second"):
        claim = builders.claim(name, "tenant", [builders.exactly("gpu", DRIVER_NAME, 1)])
        pod = builders.pod(name, "tenant", claims={"gpu": {"claim": name}})
        pod["spec"]["nodeName"] = node  # past the scheduler, which would refuse the second
        for body in (claim, pod):
            body["metadata"]["labels"].pop(RUN_LABEL)
        claim = kube.create(rest.RESOURCE_CLAIMS, claim, namespace)
        pod = kube.create(rest.PODS, pod, namespace)
        claim["status"] = {
            "allocation": {"devices": {"results": [{"request": "gpu", "driver": DRIVER_NAME, "pool": pool, "device": device}]},
                           "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                               {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
            "reservedFor": [{"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}],
        }
        kube.replace_status(rest.RESOURCE_CLAIMS, claim)
