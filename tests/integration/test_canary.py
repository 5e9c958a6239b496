"""Canaries across an upgrade the harness does not drive: start, the cluster upgraded, verify, stop.

The embedded cluster plays the user's staging cluster: canaries are started through its
kubeconfig like on any cluster, then its control plane and drivers are swapped for the next
release (what `dra-harness upgrade` does), then `canary verify` must find every invariant held;
a canary claim replaced behind its back must make it exit 1, and `canary stop` leaves nothing, even
after a `canary start` killed with SIGKILL part-way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from dra_harness.kube import builders, rest
from dra_harness.kube.pods import wait_running
from dra_harness.kube.waits import wait_for_deletion
from dra_harness.providers.embedded.cluster import ClusterSpec, LocalCluster
from dra_harness.upgrade import plan, runner
from dra_harness.upgrade.workloads import request

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "dra_harness.cli", "canary"]


@pytest.fixture(scope="module")
def upgraded_cluster_with_canaries(tmp_path_factory):
    binaries = runner.build(runner.UpgradeSpec("1.36.3", "1.37.2"))
    name = f"it-canary-{uuid.uuid4().hex[:6]}"
    cluster = LocalCluster(name)
    cluster.up(ClusterSpec(name=name, nodes=2, gpus_per_node=4, k8s_version="1.36.3", owner_pid=os.getpid()))
    run_dir = tmp_path_factory.mktemp("canary")
    try:
        out = subprocess.run([*CLI, "start", "--kubeconfig", str(cluster.kubeconfig), "--run-dir", str(run_dir)],
                             capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert out.returncode == 0, out.stdout + out.stderr
        for step in plan.steps("1.36.3", "1.37.2", ["gpu-node-0", "gpu-node-1"], []):
            cluster.swap(step.process, step.version, binaries[step.version][step.binary])
        yield cluster, run_dir
    finally:
        cluster.down()


def _verify(run_dir: Path) -> tuple[subprocess.CompletedProcess, dict]:
    out = subprocess.run([*CLI, "verify", str(run_dir)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    print(out.stdout, out.stderr)
    return out, json.loads((run_dir / "canary-verify.json").read_text())


def test_canaries_keep_their_claims_and_containers_through_the_upgrade_and_a_new_claim_allocates(upgraded_cluster_with_canaries):
    cluster, run_dir = upgraded_cluster_with_canaries
    assert "v1.37.2" in cluster.kube().raw("/version")
    out, result = _verify(run_dir)
    assert out.returncode == 0, out.stdout
    assert result["held"] and {i["name"] for i in result["invariants"]} == {"allocations", "containers", "allocates"}
    assert result["new_claim_pod_ran_after_s"] is not None and "prepared" in result["not_established"]


def test_a_canary_claim_replaced_behind_its_back_fails_verify_and_stop_leaves_nothing(upgraded_cluster_with_canaries):
    cluster, run_dir = upgraded_cluster_with_canaries
    kube = cluster.kube()
    record = json.loads((run_dir / "canary.json").read_text())
    ns = record["namespace"]
    kube.delete(rest.PODS, "pair-0", ns, grace_seconds=0)
    wait_for_deletion(kube, rest.PODS, "pair-0", 60, ns)
    kube.delete(rest.RESOURCE_CLAIMS, "pair", ns)
    wait_for_deletion(kube, rest.RESOURCE_CLAIMS, "pair", 60, ns)
    kube.create(rest.RESOURCE_CLAIMS, builders.claim("pair", record["run_id"], [request(2)]), ns)
    kube.create(rest.PODS, builders.pod("pair-0", record["run_id"], claims={"gpu": {"claim": "pair"}}), ns)
    wait_running(kube, ns, "pair-0", 60)
    out, result = _verify(run_dir)
    assert out.returncode == 1, out.stdout
    broken = {i["name"]: i["breaches"] for i in result["invariants"]}
    assert any(f"claim {ns}/pair was replaced" in b for b in broken["allocations"]), broken
    assert any(f"pod {ns}/pair-0 was replaced" in b for b in broken["containers"]), broken
    stop = subprocess.run([*CLI, "stop", str(run_dir)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert stop.returncode == 0, stop.stderr
    assert not (run_dir / "canary.json").exists()
    assert ns not in {n["metadata"]["name"] for n in kube.list(rest.NAMESPACES)}


def test_a_canary_start_killed_part_way_is_refused_by_verify_and_removed_by_stop(upgraded_cluster_with_canaries, tmp_path):
    cluster, _ = upgraded_cluster_with_canaries
    kube = cluster.kube()
    start = subprocess.Popen([*CLI, "start", "--kubeconfig", str(cluster.kubeconfig), "--run-dir", str(tmp_path)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    deadline = time.monotonic() + 120
    ns = None
    # The start is frozen (SIGSTOP) while we look, and let on in 50 ms steps until its namespace exists: a loaded
    # machine's slow API call must not give it the time to finish before the kill.
    while not (tmp_path / "canary.json").exists() and time.monotonic() < deadline and start.poll() is None:
        time.sleep(0.01)
    while ns is None and time.monotonic() < deadline and start.poll() is None:
        start.send_signal(signal.SIGSTOP)
        candidate = json.loads((tmp_path / "canary.json").read_text())["namespace"]
        if candidate in {n["metadata"]["name"] for n in kube.list(rest.NAMESPACES)}:
            ns = candidate
            break
        start.send_signal(signal.SIGCONT)
        time.sleep(0.05)
    start.send_signal(signal.SIGKILL)
    start.wait(30)
    assert ns, "canary start never recorded a namespace it had created"
    verify = subprocess.run([*CLI, "verify", str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert verify.returncode != 0 and "did not finish" in verify.stderr and "Traceback" not in verify.stderr, verify.stderr
    stop = subprocess.run([*CLI, "stop", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert stop.returncode == 0, stop.stderr
    assert ns not in {n["metadata"]["name"] for n in kube.list(rest.NAMESPACES)} and not (tmp_path / "canary.json").exists()
