"""A cordon of the harness's is recorded on the node, survives a kill of its run, and is undone only while still its own.

Against a real API server (an embedded cluster reached as ``--cluster existing``), because
what the guard relies on is the server's: a JSON patch's failed ``test`` op is a 422 that
changes nothing, and the last writer of ``spec.unschedulable`` shows in managedFields.

- pytest killed with SIGKILL mid-drain: its watchdog uncordons the node (negative control:
  a cordon without the record, as the harness used to patch it, outlives the watchdog);
- an operator who uncordons and cordons again a node the harness cordoned keeps it cordoned;
- a run id whose objects are on the cluster already is refused in one line, touching nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from dra_harness.kube import rest
from dra_harness.plugin import run_watchdog
from dra_harness.labels import CORDONED_BY_ANNOTATION, RUN_LABEL
from dra_harness.providers import node_changes
from tests.integration import owned

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]


def _wait_for(what: str, probe, timeout: float, every: float = 0.2, log: Path | None = None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = probe()
        if value:
            return value
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}" + (f":\n{log.read_text()[-3000:]}" if log else ""))


def _cordoned(kube: rest.Kube) -> dict[str, str | None]:
    """Cordoned node -> the run its record names (None: no record)."""
    return {n["metadata"]["name"]: node_changes.cordoned_by(n) for n in kube.list(rest.NODES) if n["spec"].get("unschedulable")}


#: A disruptive test whose drain cannot end: a PodDisruptionBudget forbids evicting the one pod on the node.
_HELD_DRAIN = """
import pytest
from dra_harness.kube import rest
from dra_harness.kube.pods import wait_running

pytestmark = pytest.mark.disruptive


def test_a_drain_a_budget_holds(cluster, namespace, disruptor):
    node = disruptor.target_node()
    cluster.pod(namespace, "held", node_name=node, labels={"app": "held"})
    wait_running(cluster.kube, namespace, "held")
    cluster.kube.create(rest.PDBS, {"metadata": {"name": "held"},
                                    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "held"}}}}, namespace)
    with disruptor.restoring(node):
        disruptor.drain(node, timeout=600)
"""


def test_a_node_still_cordoned_after_a_kill_mid_drain_is_uncordoned_by_the_watchdog(small_cluster, tmp_path):
    kube = small_cluster.kube()
    log = tmp_path / "out.log"
    run_id = f"killed-drain-{uuid.uuid4().hex[:6]}"
    (tmp_path / "test_held_drain.py").write_text(_HELD_DRAIN)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", str(tmp_path / "test_held_drain.py"), "--cluster=existing",
         f"--kubeconfig={small_cluster.kubeconfig}", "--allow-disruptive", f"--run-id={run_id}", "-p", "no:cacheprovider",
         "-q"], cwd=tmp_path, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        node = _wait_for("the drain's cordon", lambda: next(iter(_cordoned(kube)), None), 120, every=0.05, log=log)
        time.sleep(2)  # mid-drain: its evictions turned away by the budget
        assert proc.poll() is None, log.read_text()[-3000:]
        os.kill(proc.pid, signal.SIGKILL)  # no restore, no teardown, no sweep of its own: only the watchdog is left
        proc.wait()
        killed_at = time.monotonic()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert _cordoned(kube) == {node: run_id}, f"the drain's cordon was not recorded on the node:\n{log.read_text()[-3000:]}"
    _wait_for("the watchdog to uncordon the node", lambda: not _cordoned(kube), 120)
    assert CORDONED_BY_ANNOTATION not in (kube.get(rest.NODES, node)["metadata"].get("annotations") or {})
    print(f"the watchdog uncordoned {node} {time.monotonic() - killed_at:.1f}s after pytest was killed")
    # And ends its sweep: the cluster's teardown would stop it mid-sweep (its argv names the cluster's
    # kubeconfig), leaving the run's lock directory in /tmp.
    _wait_for("the watchdog to remove the run's lock directory", lambda: not owned.run_lock_dirs(run_id), 150)
    shutil.rmtree(run_watchdog.log_path(run_id, None).parent, ignore_errors=True)  # its log, kept after a kill: read


def _watchdog_after_kill(small_cluster, run_id: str) -> None:
    """Run the watchdog of a run whose pytest is gone already, and wait for it to finish its sweep."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    lock_dir = tempfile.mkdtemp(prefix=f"dra-harness-{run_id}-")
    subprocess.run([sys.executable, "-m", "dra_harness.plugin.run_watchdog", str(dead.pid), run_id, lock_dir,
                    "sweep", str(small_cluster.kubeconfig), "", "default"], check=True, timeout=180)


def test_negative_control_a_cordon_without_the_record_outlives_the_watchdog(small_cluster):
    kube = small_cluster.kube()
    kube.patch(rest.NODES, "gpu-node-0", {"spec": {"unschedulable": True}})  # how the harness used to cordon
    assert node_changes.cordon(kube, "gpu-node-1", "killed")
    _watchdog_after_kill(small_cluster, "killed")
    assert _cordoned(kube) == {"gpu-node-0": None}, "only the recorded cordon is undone"


def test_an_operator_who_cordons_again_a_node_the_harness_cordoned_keeps_it_cordoned(small_cluster):
    kube = small_cluster.kube()
    assert node_changes.cordon(kube, "gpu-node-0", "ours")
    assert node_changes.cordon(kube, "gpu-node-1", "ours")
    # kubectl uncordon, then kubectl cordon: what they send, under their names
    kube.patch(rest.NODES, "gpu-node-0", {"spec": {"unschedulable": None}}, kind="strategic", field_manager="kubectl-uncordon")
    kube.patch(rest.NODES, "gpu-node-0", {"spec": {"unschedulable": True}}, kind="strategic", field_manager="kubectl-cordon")
    why = node_changes.uncordon(kube, "gpu-node-0", "ours")
    assert why and "kubectl-cordon" in why, why
    assert node_changes.uncordon(kube, "gpu-node-1", "ours") is None
    assert _cordoned(kube) == {"gpu-node-0": None}, "the operator's cordon stays, without the harness's record"


def test_a_failed_test_op_is_a_422_and_changes_nothing(small_cluster):
    kube = small_cluster.kube()
    assert node_changes.cordon(kube, "gpu-node-0", "ours")
    path = "/metadata/annotations/" + CORDONED_BY_ANNOTATION.replace("/", "~1")
    with pytest.raises(rest.ApiError) as e:
        kube.patch(rest.NODES, "gpu-node-0", [{"op": "test", "path": path, "value": "another-run"},
                                              {"op": "remove", "path": "/spec/unschedulable"}], kind="json")
    assert e.value.status == 422
    # The node moves on by itself (heartbeats, the node controller's unschedulable taint); what the patch names did not.
    after = kube.get(rest.NODES, "gpu-node-0")
    assert after["spec"]["unschedulable"] is True and node_changes.cordoned_by(after) == "ours"


def test_a_reused_run_id_is_refused_in_one_line_and_touches_nothing(small_cluster):
    kube = small_cluster.kube()
    kube.create(rest.NAMESPACES, {"metadata": {"name": "dra-first-run", "labels": {RUN_LABEL: "reused"}}})
    out = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "suites" / "test_allocation.py"), "--cluster=existing",
                          f"--kubeconfig={small_cluster.kubeconfig}", "--run-id=reused", "-p", "no:cacheprovider", "-q"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    errors = [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("ERROR")]
    assert out.returncode == 4 and len(errors) == 1, out.stdout + out.stderr
    assert "--run-id reused: this cluster already holds objects" in errors[0] and "Namespace/dra-first-run" in errors[0]
    namespace = kube.get(rest.NAMESPACES, "dra-first-run")
    assert not namespace["metadata"].get("deletionTimestamp"), "the refused run swept the first run's namespace"
