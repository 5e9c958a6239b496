"""Virtual time: verdicts that do not depend on the machine, proven on a private embedded cluster.

One seed twice (once sending provably fitting arrivals ahead and leaving out the quiet window of steps
where no waiting pod has room, once settling every step in full) gives the same
verdicts and p95 waits, and a bound that counts devices the cluster lacks is caught; a control plane held to a tenth of a core through
its cgroup leaves the virtual waits alone while a wall-clock run of the same scenario (the negative
control) sees its waits grow; half the cluster turns a tier that met into one that misses; and
``contention size`` answers with a size that meets where one node fewer misses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from dra_harness.contention import queue, runner
from dra_harness.contention.ahead import Room
from dra_harness.contention.scenario import Scenario, load
from dra_harness.contention.settle import SchedulerQueue
from dra_harness.contention.sizing import scaled
from dra_harness.contention.topology import Topology

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "fixtures" / "contention" / "virtual" / "two-tiers.yaml"
#: Where kube-scheduler breaks a tie between equal nodes at random, a job may land elsewhere and a later
#: wait move: a tier's p95 agrees within this share, or within a minute of scenario time.
TOLERANCE = 0.10
CPU_ROOT = Path("/sys/fs/cgroup/cpu")
#: The slowed control plane's CPU: a tenth of one core for the API server, scheduler and controller-manager together.
SLOW_QUOTA_US, PERIOD_US = 10_000, 100_000


def run(cluster, sc: Scenario, designs: list[str], out: Path, virtual: bool = True, room=Room.of) -> dict[str, dict]:
    kube = cluster.kube()
    topo = Topology(kube, sc, uuid.uuid4().hex[:12])
    scheduler = SchedulerQueue.of_embedded(cluster) if virtual else None
    topo.create()
    try:
        with queue.kueue_running(cluster, kube, topo, "queue" in designs) as admission:
            return {d: runner.run_design(kube, topo, d, out, "test", scheduler=scheduler, admission=admission, room=room)
                    for d in designs}
    finally:
        topo.delete()
        if scheduler:
            scheduler.close()


def tiers(result: dict) -> dict[str, dict]:
    return {t["tier"]: t for t in result["tiers"]}


def close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a == b
    return abs(a - b) <= max(60.0, TOLERANCE * max(a, b))


#: A tier with fewer jobs has a p95 that is one job's wait: one tie moves it whole, so only its verdict is compared.
P95_JOBS = 10


def assert_same(first: dict, second: dict) -> None:
    """Same verdict per tier, and the p95 of a tier of :data:`P95_JOBS` jobs or more within :data:`TOLERANCE`."""
    for name, a in tiers(first).items():
        b = tiers(second)[name]
        assert a["verdict"] == b["verdict"], (first["design"], name, a, b)
        if a["jobs"] >= P95_JOBS:
            assert close(a["wait_s"]["p95"], b["wait_s"]["p95"]), (first["design"], name, a["wait_s"], b["wait_s"])


@pytest.fixture(scope="module")
def baseline(spares, tmp_path_factory) -> Iterator[tuple[object, dict[str, dict]]]:
    """The scenario's shared and reserved designs in virtual time once, on a private cluster the module keeps."""
    cluster = spares.take()
    spares.start()
    try:
        yield cluster, run(cluster, load(SCENARIO), ["shared", "reserved"], tmp_path_factory.mktemp("baseline"))
    finally:
        spares.give_back(cluster)


def test_one_seed_run_twice_in_virtual_time_gives_the_same_verdicts_and_waits(baseline, tmp_path):
    """The second run settles every step in full (nothing sent ahead, no step's quiet window left out because no
    waiting pod had room): the same answers say neither shortcut changes any."""
    cluster, first = baseline
    second = run(cluster, load(SCENARIO), ["shared", "reserved"], tmp_path, room=lambda topo, design: None)
    assert sum(first[d]["virtual"]["no_room"] for d in ("shared", "reserved")) > 0, [first[d]["virtual"] for d in first]
    assert sum(second[d]["virtual"]["no_room"] for d in ("shared", "reserved")) == 0
    # Arrivals that could only park skip their quiet window too (17 and 6 such steps measured): the same control.
    assert sum(first[d]["virtual"]["parks"] for d in ("shared", "reserved")) > 0, [first[d]["virtual"] for d in first]
    assert sum(second[d]["virtual"]["parks"] for d in ("shared", "reserved")) == 0
    for design in ("shared", "reserved"):
        assert first[design]["clock"] == "virtual" and first[design]["jobs_lost"] == 0, first[design]
        assert first[design]["virtual"]["sent_ahead"] > 0 and first[design]["virtual"]["ahead_broken"] == 0, first[design]["virtual"]
        assert second[design]["virtual"]["sent_ahead"] == 0, second[design]["virtual"]
        assert_same(first[design], second[design])


@contextmanager
def slowed(cluster, quota_us: int = SLOW_QUOTA_US) -> Iterator[None]:
    """kube-apiserver, kube-scheduler and kube-controller-manager held to ``quota_us`` per 100 ms of CPU, then put back."""
    if not (CPU_ROOT / "cgroup.procs").exists() or os.geteuid() != 0:
        pytest.skip("needs root and the cgroup v1 cpu controller to slow the control plane")
    group = CPU_ROOT / f"dra-harness-slow-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    pids = [t.pid for t in cluster.supervisor.tracked()
            if t.name in ("kube-apiserver", "kube-scheduler", "kube-controller-manager") and t.alive()]
    assert len(pids) == 3, cluster.supervisor.tracked()
    before = {pid: _cpu_cgroup(pid) for pid in pids}
    try:
        (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(quota_us))
        for pid in pids:
            (group / "cgroup.procs").write_text(str(pid))
        yield
    finally:
        for pid, path in before.items():
            try:
                (CPU_ROOT / path.lstrip("/") / "cgroup.procs").write_text(str(pid))
            except OSError:
                pass
        group.rmdir()


def _cpu_cgroup(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    return "/"


def test_a_slowed_control_plane_leaves_virtual_waits_alone_and_grows_wall_clock_ones(baseline, tmp_path):
    cluster, first = baseline
    sc = load(SCENARIO)
    fast = replace(sc, time_compression=3600)  # 1 h of work in 1 s: the control plane's latency shows at once
    wall_before = run(cluster, fast, ["reserved"], tmp_path / "wall-before", virtual=False)["reserved"]
    with slowed(cluster):
        virtual = run(cluster, sc, ["reserved"], tmp_path / "virtual-slow")["reserved"]
        wall_after = run(cluster, fast, ["reserved"], tmp_path / "wall-slow", virtual=False)["reserved"]
    # The slowing took: the same virtual run took longer in wall time ...
    assert virtual["wall_s"] > 1.3 * first["reserved"]["wall_s"], (virtual["wall_s"], first["reserved"]["wall_s"])
    # ... and its scenario-time waits did not move (beyond the scheduler's random ties).
    assert_same(virtual, first["reserved"])
    # Negative control: in wall time the slower control plane is read as longer waits.
    hi_before, hi_after = tiers(wall_before)["hi"]["wait_s"], tiers(wall_after)["hi"]["wait_s"]
    assert hi_after["p50"] > 1.5 * max(hi_before["p50"], 1.0), (hi_before, hi_after)


def test_half_the_cluster_turns_a_tier_that_met_into_one_that_misses(baseline, tmp_path):
    cluster, first = baseline
    sc = load(SCENARIO)
    half = replace(scaled(sc, sc.nodes // 2), name=f"{sc.name}-half")
    smaller = run(cluster, half, ["reserved"], tmp_path)["reserved"]
    met = [name for name, t in tiers(first["reserved"]).items() if t["verdict"] == "meets"]
    now_missing = [name for name in met if tiers(smaller)[name]["verdict"] == "misses"]
    assert now_missing, (tiers(first["reserved"]), tiers(smaller))


def test_negative_control_a_bound_counting_devices_the_cluster_lacks_is_caught_as_broken(baseline, tmp_path):
    """Half the cluster, counted as if whole: arrivals sent ahead that find no device are found out, not trusted."""
    cluster, _ = baseline
    sc = load(SCENARIO)
    half = replace(scaled(sc, sc.nodes // 2), name=f"{sc.name}-half")
    phantom = Topology(None, sc, uuid.uuid4().hex[:12])  # type: ignore[arg-type]  # devices no cluster has
    result = run(cluster, half, ["shared"], tmp_path, room=lambda topo, design: Room.of(phantom, design))["shared"]
    assert result["virtual"]["ahead_broken"] > 0, result["virtual"]
    # Each broken bound says where its pod stood: turned away for the devices the phantom half lacks.
    assert all("unschedulable" in seen for seen in result["virtual"]["ahead_broken_seen"].values()), result["virtual"]
    assert result["jobs_lost"] == 0, result


def test_contention_size_finds_a_size_that_meets_where_one_node_fewer_misses(baseline, tmp_path):
    cluster, _ = baseline
    out = subprocess.run([sys.executable, "-m", "dra_harness.cli", "contention", "size", str(SCENARIO), "--design", "reserved",
                          "--cluster-name", cluster.name, "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    sizing = json.loads(next(tmp_path.rglob("two-tiers-sizing.json")).read_text())
    row = next(r for r in sizing["rows"] if r["design"] == "reserved")
    probes = {p["nodes"]: p for p in row["probes"]}
    assert probes[row["nodes"]]["meets"], row
    assert not probes[row["nodes"] - 1]["meets"], row
    assert "reserved" in out.stdout
