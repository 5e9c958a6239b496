"""``dra-harness preflight``: the facts of a cluster reached through a kubeconfig, and one line for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from dra_harness.kube import rest
from dra_harness.labels import RUN_LABEL

ROOT = Path(__file__).resolve().parents[2]


def _preflight(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dra_harness.cli", "preflight", *args],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)


def test_preflight_prints_the_clusters_facts_and_leaves_nothing(small_cluster, tmp_path):
    kube = small_cluster.kube()
    kube.patch(rest.NODES, "gpu-node-1", {"spec": {"unschedulable": True}})
    out = _preflight("--kubeconfig", str(small_cluster.kubeconfig), "--json", "--out", str(tmp_path / "preflight.json"))
    assert out.returncode == 0, out.stderr[-2000:]
    facts = json.loads(out.stdout)
    assert facts == json.loads((tmp_path / "preflight.json").read_text())
    nodes = facts["nodes"]
    assert nodes["gpu-node-0"]["schedulable"] and nodes["gpu-node-0"]["free"] == 2
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
