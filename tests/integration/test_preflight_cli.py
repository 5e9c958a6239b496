"""``dra-harness preflight``: the facts of a cluster reached through a kubeconfig, and one line for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from dra_harness.kube import rest
from dra_harness.labels import KWOK_ANNOTATION, RUN_LABEL

ROOT = Path(__file__).resolve().parents[2]


def _preflight(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dra_harness.cli", "preflight", *args],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)


def _kwok_paused(kube: rest.Kube, node: str, paused: bool) -> None:
    """Hand ``node`` back to the cluster's KWOK, or take it away and report it NotReady: then the node controller
    taints it ``node.kubernetes.io/not-ready``, as for a kubelet that stopped reporting Ready."""
    kube.patch(rest.NODES, node, {"metadata": {"annotations": {KWOK_ANNOTATION: "paused" if paused else "fake"}}})
    if paused:  # KWOK sets Ready again at once while it manages the node
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        kube.patch(rest.NODES, node, {"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "Test", "message": "set by the test",
             "lastHeartbeatTime": now, "lastTransitionTime": now}]}}, kind="strategic", sub="status")


def test_preflight_prints_the_clusters_facts_waits_for_a_node_not_ready_for_a_moment_and_leaves_nothing(
        small_cluster, tmp_path):
    """Also: a kubelet that missed its status reports (its runtime slow under load) makes its node NotReady for a
    moment. The facts hold all run long: read in that moment, they passed over a CI run's real node in every check
    that needed it. The node comes back here once the preflight waits for it (without the wait it stays
    unschedulable); a cordoned node is an owner's choice, not waited for."""
    kube = small_cluster.kube()
    kube.patch(rest.NODES, "gpu-node-1", {"spec": {"unschedulable": True}})
    _kwok_paused(kube, "gpu-node-0", True)
    proc = subprocess.Popen([sys.executable, "-m", "dra_harness.cli", "-vv", "preflight", "--kubeconfig",
                             str(small_cluster.kubeconfig), "--json", "--out", str(tmp_path / "preflight.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        for line in proc.stderr:  # the preflight watches the nodes only while it waits for one: then it comes back
            if "WATCH Node" in line:
                _kwok_paused(kube, "gpu-node-0", False)
                break
        out, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-2000:]
    facts = json.loads(out)
    assert facts == json.loads((tmp_path / "preflight.json").read_text())
    nodes = facts["nodes"]
    assert nodes["gpu-node-0"]["schedulable"] and nodes["gpu-node-0"]["free"] == 2, nodes["gpu-node-0"]
    assert list(facts["nodes_settling"]) == ["gpu-node-0"] and "Ready" in facts["nodes_settling"]["gpu-node-0"], facts
    assert not nodes["gpu-node-1"]["schedulable"], "a cordoned node was taken for schedulable"  # the fact can fail
    assert facts["rights"] and all(facts["rights"].values()), facts["rights_evidence"]  # the cluster's admin
    assert facts["driver_daemonset"] == "" and "not a pod we can restart" in facts["driver_evidence"]
    assert not kube.list(rest.NAMESPACES, label_selector=RUN_LABEL), "the probe's namespace was left"


def test_a_quota_a_policy_engine_puts_in_the_probe_namespace_a_moment_late_is_still_read(small_cluster, tmp_path):
    """Policy engines furnish a namespace moments after it exists. With no node to probe, the preflight read the
    probe namespace's quotas before they came (a twin's run under load), so on a cluster the run did not create
    it reads them no sooner than POLICY_GRACE_S after the namespace (1.5 s late here; without the grace: missed)."""
    kube = small_cluster.kube()
    key = "gpu.example.com.deviceclass.resource.k8s.io/devices"

    def late_furnisher() -> None:
        for kind, ns in kube.watch(rest.NAMESPACES, timeout_seconds=120):
            if kind == "ADDED" and ns["metadata"]["name"].startswith("drh-pre-"):
                time.sleep(1.5)
                kube.create(rest.RESOURCE_QUOTAS, {"metadata": {"name": "late"}, "spec": {"hard": {key: "1"}}},
                            ns["metadata"]["name"])
                return

    furnisher = threading.Thread(target=late_furnisher, daemon=True)
    furnisher.start()
    out = _preflight("--kubeconfig", str(small_cluster.kubeconfig), "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    admission = json.loads(out.stdout)["admission"]
    assert admission["device_quota"] == {"gpu.example.com": 1} and admission["resource_quotas"] == ["late"], admission


def test_an_unreadable_kubeconfig_is_one_line_and_exit_2(tmp_path):
    out = _preflight("--kubeconfig", str(tmp_path / "missing"))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "missing" in out.stderr and "Traceback" not in out.stderr
