"""``dra-harness upgrade``: a real in-place upgrade of the embedded cluster, and its negative controls.

v1.36.3 -> v1.37.2 with one real node where this host can run one (as root): every invariant
holds and is listed with its evidence; then the same upgrade with faults injected after the
first step exits 1 and names each breach; and the driver rolled to its next release and back, as
processes and, on the real node, as a DaemonSet. Both builds are cached after the first run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dra_harness.providers.embedded.cluster import all_clusters
from dra_harness.components.real_node_host import unavailable_reason

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
REAL = 1 if unavailable_reason() is None else 0
FROM, TO = "1.36.3", "1.37.2"


def _upgrade(out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    # The upgrade's own clusters (upgrade-*): other tests' clusters may come and go meanwhile.
    before = {c.name for c in all_clusters() if c.name.startswith("upgrade-")}
    proc = subprocess.run(
        [sys.executable, "-m", "dra_harness.cli", "upgrade", "--from", FROM, "--to", TO, "--real-nodes", str(REAL),
         "--report-dir", str(out), *extra],
        capture_output=True, text=True, timeout=2400, cwd=ROOT)
    print(proc.stdout[-6000:], proc.stderr[-3000:])
    left = {c.name for c in all_clusters() if c.name.startswith("upgrade-")} - before
    assert not left, f"the upgrade left clusters behind: {left}"
    assert (out / "upgrade" / "upgrade.json").exists(), proc.stderr[-2000:]
    return proc, json.loads((out / "upgrade" / "upgrade.json").read_text())


def test_an_in_place_upgrade_keeps_every_claim_device_and_container_and_lists_each_invariant(tmp_path):
    proc, body = _upgrade(tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert body["held"] and (body["from"], body["to"]) == (FROM, TO)
    assert {i["name"]: i["held"] for i in body["invariants"]} == dict.fromkeys(
        ["allocations", "containers", "prepared", "allocates", "storage", *(["unprepared"] if REAL else [])], True)
    processes = [s["process"] for s in body["steps"]]
    assert processes[:3] == ["kube-apiserver", "kube-controller-manager", "kube-scheduler"]
    assert processes.count("kubelet-real-node-0") == REAL
    # Every step was followed by a new claim's pod, and the real node ran one under each skew.
    assert all(s["first_allocation_after_s"] is not None for s in body["steps"])
    if REAL:
        skewed = next(s for s in body["steps"] if s["process"] == "kube-scheduler")
        assert "real-node-0" in skewed["real_node_pod_s"], skewed
    # Five claims on simulated nodes, two more with a real node; each read from etcd.
    stored = body["storage"]["after"]["resourceclaims"]
    assert set(stored) == {"resource.k8s.io/v1"} and sum(stored.values()) >= 5 + 2 * REAL, stored
    assert (tmp_path / "upgrade" / "upgrade-timeline.png").stat().st_size > 10_000
    # The sign-off report has the Upgrade concern, one check per invariant.
    report = json.loads((tmp_path / "summary.json").read_text())
    concern = next(c for c in report["concerns"] if c["id"] == "upgrade")
    assert concern["outcome"] == "passed" and len(concern["checks"]) == len(body["invariants"]), concern
    assert report["verdict"] == "PASS" and (tmp_path / "signoff.html").exists()
    if REAL:  # the reboot after the upgrade is reported either way, each pod with its outcome
        assert body["reboot"]["pods"] and any(f.startswith("after a reboot of real-node-0") for f in body["findings"]), body


def test_faults_injected_between_steps_fail_the_upgrade_and_each_is_named(tmp_path):
    faults = ["claim-replaced", "class-typo", "stored-unserved"] + (
        ["container-restart", "cdi-removed", "driver-gone-at-unprepare"] if REAL else [])
    proc, body = _upgrade(tmp_path, *(a for f in faults for a in ("--inject", f)))
    assert proc.returncode == 1, proc.stdout[-4000:]
    broken = {i["name"]: i["breaches"] for i in body["invariants"]}
    assert any("configured was replaced" in b for b in broken["allocations"]), broken
    assert any("configured-0 was replaced" in b for b in broken["containers"]), broken
    if REAL:
        assert any("restarted: restarts 0 -> 1" in b for b in broken["containers"]), broken
        assert any("was removed (the claim was unprepared)" in b for b in broken["prepared"]), broken
        assert any("was not unprepared after its pod ended" in b for b in broken["unprepared"]), broken
    # The selector typo blocked allocation at the last step only, and the object stored behind the API
    # server's back is the only storage breach: only what was injected breaks.
    last = body["steps"][-1]["process"]
    assert broken["allocates"] and all(b.startswith(f"after {last}: ") for b in broken["allocates"]), broken
    assert broken["storage"] == ["resourceclaims stored as resource.k8s.io/v1alpha2, which the new API server does not serve"], broken
    assert len(body["injected"]) == len(faults)
    report = json.loads((tmp_path / "summary.json").read_text())
    assert report["verdict"] == "FAIL" and any(f["concern"] == "upgrade" and f["severity"] == "failure" for f in report["findings"])


@pytest.mark.parametrize("strategy", ["surge", "replace"] if REAL else [None])
def test_a_driver_rolled_to_the_next_release_and_back_keeps_every_claim_and_unprepares_claims_of_the_old_one(tmp_path, strategy):
    # Process swaps on the simulated nodes; on the real node a DaemonSet rolled by its image, as clusters do,
    # with the chart's surge and with a DaemonSet's default (the old pod goes first).
    proc = subprocess.run(
        [sys.executable, "-m", "dra_harness.cli", "upgrade", "--from", TO, "--driver-from", "0.3.0", "--driver-to", "0.4.0",
         "--and-back", "--real-nodes", str(REAL), "--report-dir", str(tmp_path),
         *(["--driver-daemonset", strategy] if strategy else [])],
        capture_output=True, text=True, timeout=2400, cwd=ROOT)
    print(proc.stdout[-6000:], proc.stderr[-3000:])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    body = json.loads((tmp_path / "upgrade" / "upgrade.json").read_text())
    drivers = [(s["process"], s["version"]) for s in body["steps"]]
    assert all(p.startswith("driver-") for p, _ in drivers) and [v for _, v in drivers].count("0.3.0") == len(drivers) // 2
    held = {i["name"]: i["held"] for i in body["invariants"]}
    assert all(held.values()), held
    # With a real node, a claim the old driver prepared was unprepared by the new one when its pod ended.
    assert ("unprepared" in held) == bool(REAL)
    if REAL:  # the DaemonSet was rolled there and back, and a new claim's pod ran on its node after each roll
        rolls = [s for s in body["steps"] if s["process"] == "driver-daemonset-real-node-0"]
        assert [s["version"] for s in rolls] == ["0.4.0", "0.3.0"], drivers
        assert all("real-node-0" in s["real_node_pod_s"] and s["stopping_s"] > 0 for s in rolls), rolls
        if strategy == "surge":  # the new pod ran before the old one went: no time without a driver pod
            assert all(s["serving_after_s"] == 0 for s in rolls), rolls
    # Each gap in the driver's slices through the roll is reported as a finding, one sentence per gap.
    gaps = [f for f in body["findings"] if " published " in f and " devices for " in f]
    assert len(gaps) == len(body["slice_gaps"]), body
