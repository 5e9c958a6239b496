"""The contention suite on a cluster the harness did not create: simulated nodes run by our own KWOK.

An embedded cluster is reached as an existing cluster, through its kubeconfig only. With
``--allow-contention --simulated-nodes 16`` the suite adds the scenario's nodes there, annotated
for a KWOK process this run starts (it manages those nodes and no other), and runs the seed
scenario's designs on that API server and scheduler. Afterwards nothing of the run is left:
no node, slice, class, namespace, and no KWOK process. Negative controls: without
``--allow-contention`` the suite skips and names the flags it needs; and nodes annotated for a
KWOK that is not running never become Ready, so it was our KWOK that ran the jobs.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from dra_harness.contention.scenario import load
from dra_harness.contention.topology import Topology
from dra_harness.kube import rest
from dra_harness.kube.waits import WaitError
from dra_harness.labels import RUN_LABEL
from dra_harness.providers.handle import sweep_run
from dra_harness.providers import simulated_nodes
from dra_harness.providers.embedded import twin
from dra_harness.report.results import read_results

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]


def _run(cluster, report: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dra_harness.cli", "run", "--cluster", "existing", "--kubeconfig", str(cluster.kubeconfig),
         "--report-dir", str(report), *extra, "-k", "test_contention"],
        capture_output=True, text=True, timeout=1500, cwd=ROOT)


def _kwok_processes() -> list[str]:
    out = subprocess.run(["pgrep", "-fa", f"annotation-selector={simulated_nodes.ANNOTATION}"], capture_output=True, text=True)
    return out.stdout.strip().splitlines()


def test_the_contention_suite_runs_on_an_existing_cluster_on_simulated_nodes_of_its_own_kwok(small_cluster, tmp_path):
    out = _run(small_cluster, tmp_path / "run", "--allow-contention", "--simulated-nodes", "16")
    verdicts = {f"{r['suite']}::{r['test']}": r["outcome"] for r in read_results(tmp_path / "run")}
    for test, outcome in sorted(verdicts.items()):
        print(f"  {outcome:8} {test}")
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    designs = [t for t in verdicts if "accounted_for" in t]
    assert len(designs) == 3 and all(verdicts[t] == "passed" for t in designs), verdicts
    assert all(o == "passed" for o in verdicts.values()), verdicts
    kube = small_cluster.kube()
    assert twin.leftovers(kube) == [], twin.leftovers(kube)
    assert _kwok_processes() == [], "the local KWOK outlived the run"

    # Negative control: not allowed, so the suite skips and says which flags it needs.
    out = _run(small_cluster, tmp_path / "refused", "--simulated-nodes", "16")
    results = read_results(tmp_path / "refused")
    assert results and all(r["outcome"] == "skipped" for r in results), [(r["test"], r["outcome"]) for r in results]
    assert any("--allow-contention --simulated-nodes" in r["message"] for r in results), results[0]["message"]


def test_negative_control_nodes_for_a_kwok_that_is_not_running_never_become_ready(small_cluster):
    kube = small_cluster.kube()
    sc = load(ROOT / "suites" / "contention-small.yaml")
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
    topo = Topology(kube, load(ROOT / "suites" / "contention-small.yaml"), run_id)
    topo.create()
    other = next(n["metadata"]["name"] for n in kube.list(rest.NODES) if not n["metadata"]["name"].startswith("ctn-"))
    kube.patch(rest.NODES, other, {"metadata": {"labels": {RUN_LABEL: run_id}}})
    try:
        left = sweep_run(kube, run_id, timeout=60)
        assert left == [], left
        names = {n["metadata"]["name"] for n in kube.list(rest.NODES)}
        assert not set(topo.nodes) & names, "the run's simulated nodes outlived its sweep"
        assert other in names, "the sweep deleted a node the run had only labelled"
    finally:
        kube.patch(rest.NODES, other, {"metadata": {"labels": {RUN_LABEL: None}}})
        topo.delete()
