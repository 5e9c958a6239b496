"""Contention scenarios, plans and metrics on plain data; the CLI's one-line errors for bad scenario files."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dra_harness.cli.app import main
from dra_harness.contention import compare, metrics
from dra_harness.contention import floor as floor_mod
from dra_harness.contention.plan import plan
from dra_harness.contention.recorder import Hold, JobRecord
from dra_harness.contention.scenario import ScenarioError, load, seconds

ROOT = Path(__file__).resolve().parents[2]
MALFORMED = sorted((ROOT / "fixtures" / "contention" / "malformed").glob("*.yaml"))
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml"))


def test_ten_malformed_scenarios_are_shipped():
    assert len(MALFORMED) >= 10


@pytest.mark.parametrize("path", MALFORMED, ids=lambda p: p.stem)
def test_a_malformed_scenario_is_one_line_naming_file_and_field(path: Path):
    with pytest.raises(ScenarioError) as e:
        load(path)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"scenario file {path}: ")
    assert len(msg.split(": ", 2)) == 3, msg  # scenario file <path>: field: problem


@pytest.mark.parametrize("path", MALFORMED, ids=lambda p: p.stem)
def test_the_cli_rejects_a_malformed_scenario_without_traceback(path: Path):
    result = CliRunner().invoke(main, ["contention", "run", str(path)])
    assert result.exit_code == 2
    out = result.output.strip()
    assert "Traceback" not in out and len(out.splitlines()) == 1, out
    assert path.name in out


@pytest.mark.parametrize("path", SHIPPED + [ROOT / "suites" / "contention-small.yaml"], ids=lambda p: p.stem)
def test_shipped_scenarios_are_valid_and_plan_every_job(path: Path):
    sc = load(path)
    jobs = plan(sc)
    assert len(jobs) == sc.jobs_total == len({j.name for j in jobs})
    assert jobs == plan(sc), "the plan is reproducible from the seed"
    assert all(j.duration_s >= 0 and j.at_s >= 0 for j in jobs)


def test_the_seed_scenario_is_interactive_inference_against_training():
    sc = load(ROOT / "scenarios" / "inference-vs-training.yaml")
    inference, training = sc.tier("inference"), sc.tier("training")
    assert inference.priority > training.priority
    assert inference.tolerable_wait_s <= 15 * 60 < training.tolerable_wait_s
    assert set(sc.designs) == {"shared", "reserved", "pools", "queue"}
    assert training.interruptible and training.checkpoint_interval_s == 30 * 60 and not inference.interruptible


def test_a_1000_job_scenario_is_shipped():
    assert any(load(p).jobs_total >= 1000 for p in SHIPPED)


def test_durations():
    assert seconds("90s") == 90 and seconds("5m") == 300 and seconds("2h") == 7200 and seconds(12) == 12
    assert seconds("250ms") == 0.25


def test_percentiles_interpolate():
    assert metrics.percentile([], 50) is None
    assert metrics.percentile([1, 2, 3, 4], 50) == 2.5
    assert metrics.percentile([5], 99) == 5


def test_lost_jobs_say_why():
    sc = load(ROOT / "suites" / "contention-small.yaml")
    jobs = plan(sc)
    done = JobRecord(jobs[0].name, created=1, running=2, completed=3)
    hung = JobRecord(jobs[1].name, created=1, running=2)
    gone = JobRecord(jobs[2].name, created=1, deleted=2, preempted="PreemptionByScheduler")
    lost = metrics.lost_jobs(jobs, {r.name: r for r in (done, hung, gone)})
    assert jobs[0].name not in lost
    assert lost[jobs[1].name] == "still running at the deadline"
    assert "PreemptionByScheduler" in lost[jobs[2].name]
    assert all(lost[j.name] == "never created" for j in jobs[3:])


def test_tier_verdict_uses_scenario_time_and_lost_jobs():
    sc = load(ROOT / "suites" / "contention-small.yaml")   # compression 600, hi tolerates 5 min
    jobs = [j for j in plan(sc) if j.tier == "hi"]
    fast = {j.name: JobRecord(j.name, created=0.0, running=0.1, completed=1.0) for j in jobs}  # 1 scenario minute
    tiers = {t["tier"]: t for t in metrics.tiers(sc, jobs, fast, {})}
    assert tiers["hi"]["verdict"] == "meets" and tiers["hi"]["wait_s"]["p95"] == pytest.approx(60)
    slow = {j.name: JobRecord(j.name, created=0.0, running=1.0, completed=2.0) for j in jobs}  # 10 scenario minutes
    tiers = {t["tier"]: t for t in metrics.tiers(sc, jobs, slow, {})}
    assert tiers["hi"]["verdict"] == "misses" and tiers["hi"]["over_tolerable"] == len(jobs)
    tiers = {t["tier"]: t for t in metrics.tiers(sc, jobs, fast, {jobs[0].name: "never created"})}
    assert tiers["hi"]["verdict"] == "misses" and tiers["hi"]["lost"] == 1


def test_a_tolerable_wait_within_ten_floors_gets_no_verdict_either_way():
    sc = load(ROOT / "suites" / "contention-small.yaml")   # compression 600: hi tolerates 5 min, lo 2 h
    jobs = plan(sc)
    fast = {j.name: JobRecord(j.name, created=0.0, running=0.1, completed=1.0) for j in jobs}
    slow = {j.name: JobRecord(j.name, created=0.0, running=20.0, completed=21.0) for j in jobs}  # 200 scenario minutes
    # A 0.1 s wall floor is 1 scenario minute at 600x: a verdict needs a tolerable wait above 10 minutes.
    floor = floor_mod.summarise([0.05] * 10 + [0.1] * 10, sc.time_compression)
    assert floor["p95_s"] == pytest.approx(60) and floor["established_above_s"] == pytest.approx(600)
    for records in (fast, slow):
        tiers = {t["tier"]: t for t in metrics.tiers(sc, jobs, records, {}, floor["established_above_s"])}
        assert tiers["hi"]["verdict"] == "not established"
        assert tiers["lo"]["verdict"] == ("meets" if records is fast else "misses")
    # Negative control: without the floor the same fast run is judged, so the floor is what withheld it.
    assert {t["tier"]: t["verdict"] for t in metrics.tiers(sc, jobs, fast, {})}["hi"] == "meets"


def test_the_chosen_compression_keeps_the_shortest_tolerable_wait_twenty_floors_and_never_exceeds_its_bound():
    sc = load(ROOT / "suites" / "contention-small.yaml")   # hi tolerates 5 min = 300 s
    # A floor of 0.02 s: 300 s / (20 x 0.02 s) = 750x, where the wait is exactly 20 floors.
    assert floor_mod.compression([0.02] * 20, sc, most=10_000) == pytest.approx(750)
    walls = [0.02] * 15 + [0.03] * 5
    chosen = floor_mod.compression(walls, sc, most=10_000)
    assert 300 / chosen >= 20 * metrics.percentile(walls, 95)   # rounded down: never under the margin
    # Bounded: a tiny floor never runs it faster than asked, and no floor measured keeps the bound.
    assert floor_mod.compression([0.001] * 20, sc, most=1200) == 1200
    assert floor_mod.compression([], sc, most=1200) == 1200
    # Negative control: a floor ten times larger cuts the compression tenfold (a slow machine is slowed).
    assert floor_mod.compression([0.2] * 20, sc, most=10_000) == pytest.approx(75)


def test_only_a_verdict_established_at_both_compressions_can_flip():
    def run(compression: float, **verdicts: str) -> list[dict]:
        return [{"design": "shared", "time_compression": compression,
                 "tiers": [{"tier": k, "verdict": v} for k, v in verdicts.items()]}]

    assert compare.flips(run(300, hi="meets", lo="misses"), run(150, hi="meets", lo="misses")) == []
    assert compare.flips(run(300, hi="not established", lo="misses"), run(150, hi="meets", lo="misses")) == []
    assert compare.flips(run(300, hi="meets", lo="misses"), run(150, hi="misses", lo="misses")) == [
        "shared / hi: meets at 300x, misses at 150x"]


def test_utilisation_and_idle_reserved_capacity():
    holds = [Hold("c1", "p1", ["n/gpu-0"], 0.0, 1.0), Hold("c2", "p2", ["n/gpu-1", "n/gpu-2"], 0.5, 2.0)]
    util = metrics.utilisation(holds, 0.0, 2.0, 4, 10.0, step_wall=0.5)
    assert [s[1] for s in util["samples"]] == [1, 3, 2, 2, 0]
    assert util["samples"][1][0] == 5.0  # scenario seconds
    # gpu-0 reserved: held 1 of 2 wall seconds -> 1 s idle x 10 = 10 scenario device-seconds
    assert metrics.idle_reserved(holds, {"n/gpu-0"}, 0.0, 2.0, 10.0) == 10.0


def test_designs_select_devices_by_published_attributes():
    from dra_harness.contention.topology import Topology

    sc = load(ROOT / "suites" / "contention-small.yaml")  # 2 nodes x 8; hi reserves 4; groups a (hi), b (lo)
    topo = Topology(None, sc, "run1", tag="t1")  # type: ignore[arg-type]
    assert [d.group for d in topo.devices] == ["a"] * 8 + ["b"] * 8
    assert topo.reserved_ranges("reserved") == {"hi": (0, 4)}
    assert "ordinal'] " not in topo.selector("reserved", "lo")
    assert topo.selector("reserved", "lo").endswith("ordinal >= 4)")
    assert "ordinal >= 0 && device.attributes['contention.dra-harness.io'].ordinal < 4" in topo.selector("reserved", "hi")
    assert topo.selector("pools", "hi").endswith("nodeGroup in ['a']")
    assert "ordinal" not in topo.selector("shared", "hi") and "nodeGroup" not in topo.selector("shared", "hi")
    lo_dev, hi_dev = topo.devices[0], topo.devices[8]   # reserved for hi / common
    assert topo.allows("reserved", "hi", lo_dev) and not topo.allows("reserved", "lo", lo_dev)
    assert topo.allows("reserved", "lo", hi_dev) and not topo.allows("pools", "hi", hi_dev)
    assert topo.violations("reserved", {"lo-0": ("lo", [f"{lo_dev.node}/{lo_dev.name}"])}) == [
        f"lo-0 (lo) got {lo_dev.node}/{lo_dev.name}"]
