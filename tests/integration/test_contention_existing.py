"""The contention suite on a cluster the harness did not create: its own devices, or simulated nodes of our KWOK.

An embedded cluster is reached as an existing cluster, through its kubeconfig only. On its real
node (labelled ``dra-harness.io/contention-allowed=true``, as a user would) the jobs are pods
with a sleeping container taking the example driver's devices, the reserved design naming its
device by uuid; without the label nothing runs and the run says why. With
``--allow-contention --simulated-nodes 16`` the suite adds the scenario's nodes there, annotated
for a KWOK process this run starts (it manages those nodes and no other), and runs the small
scenario's pools design on that API server and scheduler; with ``--kwok-image`` that KWOK is a
Deployment in the cluster, on its real node, instead. Afterwards nothing of the run is left:
no node, slice, class, namespace, role, and no KWOK process. Negative controls: without
``--allow-contention`` the suite skips and names the flags it needs; and nodes annotated for a
KWOK that is not running never become Ready, so it was our KWOK that ran the jobs; and an
in-cluster KWOK with no real node to run on fails to start in one line and leaves nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from dra_harness.contention.scenario import load
from dra_harness.contention.topology import Topology
from dra_harness.kube import rest
from dra_harness.kube.waits import WaitError
from dra_harness.components.images import WORKLOAD_IMAGE
from dra_harness.labels import CONTENTION_ALLOWED_LABEL, RUN_LABEL
from dra_harness.components.real_node_host import unavailable_reason
from dra_harness.providers.sweep import NODE_LEASE_NAMESPACE, sweep_run
from dra_harness.providers.lock import LEASES
from dra_harness.components.images import KWOK_IMAGE, kwok_image, tarball
from dra_harness.errors import ClusterError
from dra_harness.providers import incluster_kwok, simulated_nodes
from dra_harness.providers.embedded import realcluster
from dra_harness.providers.embedded import twin
from dra_harness.report.results import read_results
from tests.integration import owned

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "suites" / "contention-small.yaml"


def _run(cluster, report: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dra_harness.cli", "run", "--cluster", "existing", "--kubeconfig", str(cluster.kubeconfig),
         "--report-dir", str(report), "--min-established=0", *extra, "-k", "test_contention"],  # judged: contention
        capture_output=True, text=True, timeout=1500, cwd=ROOT, env={**os.environ, **(env or {})})


def test_the_contention_suite_runs_on_an_existing_cluster_on_simulated_nodes_of_its_own_kwok(small_cluster, tmp_path):
    # One design of the small scenario: what differs on an existing cluster (our KWOK, its nodes, the sweep) is the
    # same for each design and scenario, and the seed's three designs run on the embedded cluster in the suites.
    # (The seed's pools design took 54 s of wall time here at 536x, the small one's 22 s: this test 102 s -> 68 s.)
    # As a ServiceAccount holding only deploy/rbac's roles (dra-harness-contention and the node-lease Role
    # included): the run and its KWOK need no admin.
    small_cluster.kube().create(rest.NAMESPACES, {"metadata": {"name": "dra-example-driver"}})  # the driver-pods Role's
    sa = twin.serviceaccount_kubeconfig(small_cluster.kube(), small_cluster.kubeconfig, tmp_path / "sa-kubeconfig",
                                      contention=True)
    out = _run(SimpleNamespace(kubeconfig=sa), tmp_path / "run", "--allow-contention", "--simulated-nodes", "16",
               env={"DRA_HARNESS_CONTENTION": str(SMALL), "DRA_HARNESS_CONTENTION_DESIGNS": "pools"})
    verdicts = {f"{r['suite']}::{r['test']}": r["outcome"] for r in read_results(tmp_path / "run")}
    for test, outcome in sorted(verdicts.items()):
        print(f"  {outcome:8} {test}")
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    designs = [t for t in verdicts if "accounted_for" in t]
    assert len(designs) == 1 and all(verdicts[t] == "passed" for t in designs), verdicts
    assert all(o == "passed" for o in verdicts.values()), verdicts
    kube = small_cluster.kube()
    assert twin.leftovers(kube) == [], twin.leftovers(kube)  # the simulated nodes' leases included
    assert owned.kwok_processes(small_cluster) == {}, "the local KWOK outlived the run"
    # Negative control: a node lease whose node is gone is a leftover.
    orphan = {"metadata": {"name": "ctn-orphan"}, "spec": {"holderIdentity": "x"}}
    kube.create(LEASES, orphan, NODE_LEASE_NAMESPACE)
    assert f"Lease {NODE_LEASE_NAMESPACE}/ctn-orphan" in twin.leftovers(kube)
    kube.delete(LEASES, "ctn-orphan", NODE_LEASE_NAMESPACE)

    # Negative control: not allowed, so the suite skips and says which flags it needs.
    out = _run(small_cluster, tmp_path / "refused", "--simulated-nodes", "16")
    results = read_results(tmp_path / "refused")
    assert results and all(r["outcome"] == "skipped" for r in results), [(r["test"], r["outcome"]) for r in results]
    assert any("--allow-contention --simulated-nodes" in r["message"] for r in results), results[0]["message"]


def test_negative_control_nodes_for_a_kwok_that_is_not_running_never_become_ready(small_cluster):
    kube = small_cluster.kube()
    sc = load(SMALL)
    topo = Topology(kube, sc, f"nk{uuid.uuid4().hex[:6]}")
    topo.kwok = (simulated_nodes.ANNOTATION, "no-such-kwok")
    try:
        with pytest.raises(WaitError, match="0 of 2 Ready"):
            topo.create(timeout=15)
    finally:
        topo.delete()


def test_the_run_sweep_deletes_its_simulated_nodes_and_never_a_node_it_only_labelled(small_cluster):
    """What a run killed outright leaves is swept by its run label: the simulated nodes it made go; a
    node that merely carries the run's label (as a disruptive test's node would) stays."""
    kube = small_cluster.kube()
    run_id = f"sw{uuid.uuid4().hex[:6]}"
    topo = Topology(kube, load(SMALL), run_id)
    topo.create()
    other = next(n["metadata"]["name"] for n in kube.list(rest.NODES) if not n["metadata"]["name"].startswith("ctn-"))
    kube.patch(rest.NODES, other, {"metadata": {"labels": {RUN_LABEL: run_id}}})
    # A lease KWOK wrote before its node reached its cache has no owner: the garbage collector would leave it.
    kube.patch(LEASES, topo.nodes[0], {"metadata": {"ownerReferences": None}}, NODE_LEASE_NAMESPACE)
    try:
        left = sweep_run(kube, run_id, timeout=60)
        assert left == [], left
        names = {n["metadata"]["name"] for n in kube.list(rest.NODES)}
        assert not set(topo.nodes) & names, "the run's simulated nodes outlived its sweep"
        assert other in names, "the sweep deleted a node the run had only labelled"
        leases = {o["metadata"]["name"] for o in kube.list(LEASES, NODE_LEASE_NAMESPACE)}
        assert topo.nodes[0] not in leases, "the sweep left a simulated node's lease"
        assert other in leases, "the sweep deleted the lease of a node the run had only labelled"
    finally:
        kube.patch(rest.NODES, other, {"metadata": {"labels": {RUN_LABEL: None}}})
        topo.delete()


REAL_SCENARIO = ROOT / "fixtures" / "contention" / "real" / "one-node.yaml"


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"no real nodes here: {unavailable_reason()}")
def test_the_contention_suite_runs_on_the_real_devices_of_the_nodes_labelled_for_it(real_cluster, tmp_path):
    kube = real_cluster.kube()
    node = "real-node-0"
    env = {"DRA_HARNESS_CONTENTION": str(REAL_SCENARIO), "DRA_HARNESS_CONTENTION_DESIGNS": "reserved"}
    before = {n["metadata"]["name"]: n["metadata"].get("labels") for n in kube.list(rest.NODES)}

    # Negative control first: no node labelled, so no job may run anywhere, and the run says which label it needs.
    out = _run(real_cluster, tmp_path / "unlabelled", "--allow-contention", "--shell-image", WORKLOAD_IMAGE, env=env)
    assert out.returncode != 0
    assert f"no node is labelled {CONTENTION_ALLOWED_LABEL}=true" in out.stdout + out.stderr, (out.stdout + out.stderr)[-2000:]

    kube.patch(rest.NODES, node, {"metadata": {"labels": {CONTENTION_ALLOWED_LABEL: "true"}}})
    try:
        out = _run(real_cluster, tmp_path / "run", "--allow-contention", "--shell-image", WORKLOAD_IMAGE, env=env)
        verdicts = {r["test"]: (r["outcome"], r["message"]) for r in read_results(tmp_path / "run")}
        for test, outcome in sorted(verdicts.items()):
            print(f"  {outcome[0]:8} {test}")
        assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
        design = next(t for t in verdicts if "accounted_for" in t)
        assert verdicts[design][0] == "passed", verdicts
        probe = next(t for t in verdicts if "preemption_probe" in t)
        assert verdicts[probe][0] == "passed", verdicts
        control = next(t for t in verdicts if "negative_control" in t)
        assert verdicts[control][0] == "skipped" and "simulated" in verdicts[control][1], verdicts[control]

        result = json.loads((tmp_path / "run" / "contention" / "one-node-reserved.json").read_text())
        held = {d for j in json.loads((tmp_path / "run" / "contention" / result["raw"]).read_text())["jobs"].values()
                for d in j["devices"]}
        assert held and all(d.startswith(f"{node}/") for d in held), held  # the real node's devices, no simulated one
        assert result["jobs_completed"] == result["jobs_total"] == 5 and not result["design_violations"], result
        assert "uuid in" in result["device_selectors"]["inference"], result["device_selectors"]
        # The compression was lowered until inference's tolerable wait (10 min) is 20 floors.
        floor = result["floor"]
        assert result["time_compression"] < 200 and floor["wall_s"]["p95"] > 0
        assert 600 / result["time_compression"] >= 20 * floor["wall_s"]["p95"] * 0.99, (result["time_compression"], floor)
        print(f"real devices: floor p95 {floor['wall_s']['p95']} s wall, compression {result['time_compression']}x, "
              f"wall {result['wall_s']} s, tiers {[(t['tier'], t['verdict']) for t in result['tiers']]}")
    finally:
        kube.patch(rest.NODES, node, {"metadata": {"labels": {CONTENTION_ALLOWED_LABEL: None}}})
    assert twin.leftovers(kube) == [], twin.leftovers(kube)
    after = {n["metadata"]["name"]: n["metadata"].get("labels") for n in kube.list(rest.NODES)}
    assert after == before, "the run changed a node's labels"
    assert not [p for p in kube.list(rest.PODS) if (p["metadata"].get("labels") or {}).get(RUN_LABEL)]


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"no real nodes here: {unavailable_reason()}")
def test_with_kwok_image_the_runs_kwok_is_a_deployment_on_the_real_node_and_nothing_is_left(real_cluster, tmp_path):
    kube = real_cluster.kube()
    realcluster.import_images(real_cluster, real_cluster.state(), "real-node-0", [tarball(kwok_image())])
    # As a ServiceAccount holding only deploy/rbac's roles (contention's included): it binds the shipped
    # dra-harness-kwok role to its KWOK, since it may not create a ClusterRole of its own.
    if not kube.list(rest.NAMESPACES, field_selector="metadata.name=dra-example-driver"):
        kube.create(rest.NAMESPACES, {"metadata": {"name": "dra-example-driver"}})  # the driver-pods Role's
    sa = twin.serviceaccount_kubeconfig(kube, real_cluster.kubeconfig, tmp_path / "sa-kubeconfig", contention=True)
    # As on a user's cluster: the image is on the node, the run is told its name and where the pod may go.
    proc = subprocess.Popen(
        [sys.executable, "-m", "dra_harness.cli", "run", "--cluster", "existing", "--kubeconfig", str(sa),
         "--report-dir", str(tmp_path / "run"), "--min-established=0", "--allow-contention", "--simulated-nodes", "16", "--kwok-image", KWOK_IMAGE,
         "--kwok-node-selector", "kubernetes.io/hostname=real-node-0", "-k", "test_contention"],
        stdout=(tmp_path / "out.log").open("w"), stderr=subprocess.STDOUT, cwd=ROOT,
        # The small scenario: what differs here is where KWOK runs, not the scenario.
        env={**os.environ, "DRA_HARNESS_CONTENTION": str(SMALL),
             "DRA_HARNESS_CONTENTION_DESIGNS": "pools"})
    seen: set[str] = set()
    roles: set[str] = set()
    try:
        while proc.poll() is None:
            for p in kube.list(rest.PODS, label_selector=f"app.kubernetes.io/name=kwok,{RUN_LABEL}"):
                if p.get("status", {}).get("phase") == "Running":
                    seen.add(p["spec"]["nodeName"])
            roles |= {b["roleRef"]["name"] for b in kube.list(rest.CLUSTER_ROLE_BINDINGS, label_selector=RUN_LABEL)}
            # The pod's KWOK is a process of this host too (the real node's container): the local form has --kubeconfig.
            assert not [p for p in owned.kwok_processes(real_cluster).values() if "--kubeconfig=" in p], "a local KWOK ran although --kwok-image was given"
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "out.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    verdicts = {r["test"]: r["outcome"] for r in read_results(tmp_path / "run")}
    assert any("accounted_for" in t for t in verdicts) and all(o == "passed" for o in verdicts.values()), verdicts
    assert seen == {"real-node-0"}, f"KWOK's pod ran on {seen or 'no node'}"
    assert roles == {"dra-harness-kwok"}, f"KWOK was bound to {roles or 'nothing'}"
    assert twin.leftovers(kube) == [], twin.leftovers(kube)
    assert owned.kwok_processes(real_cluster) == {}, "KWOK's container outlived its Deployment"


def test_negative_control_an_in_cluster_kwok_with_no_real_node_to_run_on_fails_in_one_line_and_leaves_nothing(small_cluster):
    """Every node here is a simulated one, where a KWOK pod would only pretend to run: it must not be placed there."""
    kube = small_cluster.kube()
    kwok = incluster_kwok.ClusterKwok(kube, f"nk{uuid.uuid4().hex[:6]}", "nk-run", KWOK_IMAGE, ready_deadline=10)
    with pytest.raises(ClusterError) as e:
        kwok.start()
    assert len(str(e.value).splitlines()) == 1 and "KWOK Deployment's pod" in str(e.value), str(e.value)
    assert "Pending" in str(e.value), str(e.value)
    assert twin.leftovers(kube) == [], twin.leftovers(kube)
