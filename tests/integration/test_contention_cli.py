"""`contention run` and `bench allocation` end to end on a private embedded cluster, and bad scenarios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "dra_harness.cli"]
CONTRACT = {"scenario", "design", "k8s_version", "jobs_total", "jobs_completed", "jobs_lost", "wall_s",
            "time_compression", "tiers", "utilisation", "idle_reserved_device_s", "preemption_probe", "plots"}


def test_a_malformed_scenario_fails_in_one_line_before_any_cluster_starts():
    bad = ROOT / "fixtures" / "contention" / "malformed" / "04-priority-not-integer.yaml"
    out = subprocess.run([*CLI, "contention", "run", str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"error: scenario file {bad}: tiers[0].priority: must be an integer, not a string"]


def test_contention_run_writes_the_design_comparison(small_cluster, tmp_path):
    out = subprocess.run([*CLI, "contention", "run", str(ROOT / "suites" / "contention-small.yaml"),
                          "--cluster-name", small_cluster.name, "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for design in ("shared", "reserved", "pools"):
        result = json.loads((tmp_path / "contention" / f"small-{design}.json").read_text())
        assert set(result) >= CONTRACT
        assert result["jobs_lost"] == 0 and result["jobs_completed"] == result["jobs_total"] == 7
        assert {t["tier"] for t in result["tiers"]} == {"hi", "lo"}
        # Virtual time, the default here: no floor, and every tier gets a verdict.
        assert result["clock"] == "virtual" and result["floor"] is None and result["virtual"]["steps"] > 0, result
        assert all(t["verdict"] in ("meets", "misses") for t in result["tiers"])
        probe = result["preemption_probe"]
        assert isinstance(probe["freed_by_preemption"], bool) and probe["scheduler_message"]
        for png in result["plots"].values():
            assert (tmp_path / "contention" / png).read_bytes()[:4] == b"\x89PNG"
    reserved = json.loads((tmp_path / "contention" / "small-reserved.json").read_text())
    assert reserved["reserved_devices"] == 4 and reserved["idle_reserved_device_s"] > 0
    assert "meets" in out.stdout or "misses" in out.stdout


def test_a_tolerable_wait_below_the_floor_is_not_established_at_either_compression(small_cluster, tmp_path):
    scenario = ROOT / "fixtures" / "contention" / "floor" / "below-floor.yaml"
    out = subprocess.run([*CLI, "contention", "run", str(scenario), "--no-probe", "--clock", "wall", "--check-compression",
                          "--cluster-name", small_cluster.name, "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for folder, compression in (("contention", 36000), ("contention-at-18000x", 18000)):
        result = json.loads((tmp_path / folder / "below-floor-shared.json").read_text())
        verdicts = {t["tier"]: t["verdict"] for t in result["tiers"]}
        assert result["time_compression"] == compression and result["floor"]["time_compression"] == compression
        # 2 scenario minutes is milliseconds of wall time: below any control plane's floor.
        assert verdicts["hi"] == "not established" and verdicts["lo"] in ("meets", "misses"), (verdicts, result["floor"])
        assert result["jobs_lost"] == 0
    assert "every established verdict held" in out.stdout and "not established" in out.stdout


def test_bench_allocation_prints_percentiles(small_cluster, tmp_path):
    out = subprocess.run([*CLI, "bench", "allocation", "--rate", "10", "--nodes", "5", "--claims", "20", "--hold", "0.5",
                          "--cluster-name", small_cluster.name, "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(next((tmp_path / "bench").glob("allocation-*.json")).read_text())
    assert result["allocated"] == 20
    lat = result["allocation_latency_s"]
    assert 0 <= lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"]


def test_bench_floor_stamps_every_hop_of_each_pod_in_both_modes_and_leaves_no_node_behind(small_cluster, tmp_path):
    from dra_harness.bench.floor import HOPS
    from dra_harness.kube import rest

    kube = small_cluster.kube()
    nodes_before = sorted(n["metadata"]["name"] for n in kube.list(rest.NODES))
    out = subprocess.run([*CLI, "bench", "floor", "--samples", "3", "--gap", "0.1",
                          "--cluster-name", small_cluster.name, "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads((tmp_path / "bench" / "floor.json").read_text())
    for mode in ("idle", "warm"):
        # Every pod reached Running, and every hop of it was seen by the watches.
        assert [len(result["hops"][mode][label]) for label, _, _ in HOPS] == [3] * len(HOPS), result["hops"][mode]
        for stamps in result["stamps"][mode]:
            # Each hop is when its own watch saw it. One watch's stamps keep its order; the claim watch's and the pod
            # watch's threads may stamp the events of one instant in either order, by as much as a thread waits for
            # a core (57 ms seen under CI's three workers): within 0.5 s is the same instant.
            assert stamps["sent"] < stamps["claim_created"] <= stamps["allocated"], stamps
            assert stamps["scheduled"] <= stamps["running"], stamps
            assert stamps["allocated"] <= stamps["scheduled"] + 0.5, stamps
    assert "created -> Running" in out.stdout and "API server /version" in out.stdout
    assert sorted(n["metadata"]["name"] for n in kube.list(rest.NODES)) == nodes_before


def test_a_burst_schedules_every_pod_around_the_claims_allocated_beforehand(small_cluster, tmp_path):
    """2 simulated nodes x 4 devices, node 0's four held by claims whose status was written directly:
    the scheduler counts them as taken, so all four burst pods land on node 1."""
    from dra_harness.bench.burst import API_SERVER_SERIES, burst

    result = burst(small_cluster.kube(), "burstit", "test", 2, 4, 4, 4, tmp_path, timeout=120)
    assert result["scheduled"] == 4, result
    # The API server's counters were read before and after (a movement, never negative).
    assert set(result["api_server"]) == set(API_SERVER_SERIES) and min(result["api_server"].values()) >= 0, result
    assert list(result["pods_per_node"].values()) == [4] and next(iter(result["pods_per_node"])).endswith("-1"), result
    assert result["creation_per_s"] and result["created_to_scheduled_per_s"], result
