"""``contention size``: scaling a scenario, the search for the smallest size that meets, the hardware file,
and the answer in the sign-off report and in ``compare`` — all on plain data, with a fake run function."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from dra_harness.cli.app import main
from dra_harness.contention import sizing
from dra_harness.contention.scenario import Scenario, parse
from dra_harness.errors import InputError
from dra_harness.report import compare, render
from dra_harness.report.summary import build_summary
from tests.unit.report_runs import make_run

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "inference-vs-training.yaml"
H100 = ROOT / "fixtures" / "hardware" / "h100-node.yaml"


def _scenario(groups=((1, "serving", "inference"), (3, "training", "training")), reserved=None) -> Scenario:
    tier = lambda name, prio, width, wait: {  # noqa: E731
        "name": name, "priority": prio, "devices_per_job": width, "tolerable_wait": wait,
        "arrival": {"process": "fixed", "interval": "5m", "count": 4}, "duration": {"distribution": "fixed", "value": "1h"}}
    return parse({
        "name": "sizing", "time_compression": 300,
        "cluster": {"nodes": sum(g[0] for g in groups), "devices_per_node": 8,
                    "node_groups": [{"name": name, "nodes": n, "tiers": [t]} for n, name, t in groups]},
        "tiers": [tier("inference", 1000, 1, "10m"), tier("training", 100, 4, "2h")],
        "designs": {"shared": {}, "pools": {}, "reserved": {"devices": reserved or {"inference": 8}}},
    }, "sizing.yaml")


def _result(sc: Scenario, design: str, verdict: str = "meets", lost: int = 0) -> dict:
    """What a run returns, with the inference tier's verdict chosen; training always meets."""
    ok = verdict == "meets"
    tiers = [{"tier": "inference", "verdict": verdict, "wait_s": {"p50": 30, "p95": 120 if ok else 1500, "p99": None, "max": None},
              "tolerable_wait_s": 600, "over_tolerable": 0 if ok else 5, "lost": lost, "jobs": 4},
             {"tier": "training", "verdict": "meets", "wait_s": {"p50": 0, "p95": 60, "p99": 60, "max": 60},
              "tolerable_wait_s": 7200, "over_tolerable": 0, "lost": 0, "jobs": 4}]
    return {"design": design, "nodes": sc.nodes, "devices": sc.total_devices, "jobs_total": 8, "jobs_lost": lost,
            "utilisation": {"mean": 0.5}, "idle_reserved_device_s": 7200.0, "wall_s": 1.0, "tiers": tiers}


def _fake(meets_at, calls: list[int] | None = None, below: str = "misses"):
    """A run function whose inference tier meets iff ``meets_at(nodes)``; ``calls`` records each size run."""
    def run_at(sc: Scenario, design: str) -> dict:
        if calls is not None:
            calls.append(sc.nodes)
        return _result(sc, design, "meets" if meets_at(sc.nodes) else below)
    return run_at


# -- the search -------------------------------------------------------------------------------------------------
def test_the_search_finds_the_smallest_size_that_meets_and_one_smaller_misses():
    out = sizing.search(_scenario(), "shared", _fake(lambda n: n * 8 >= 24))
    assert (out["nodes"], out["devices"], out["devices_per_node"]) == (3, 24, 8)
    assert out["one_smaller"] == {"nodes": 2, "devices": 16, "jobs_lost": 0, "tiers_over": ["inference"],
                                  "not_established": [], "jobs_over": 5}
    assert [t["p95_s"] for t in out["tiers"]] == [120, 60] and out["utilisation_mean"] == 0.5
    assert out["idle_reserved_device_h"] == 2.0 and out["monotone"] and out["answer"] == "meets at 3 nodes (24 devices)"
    assert [(p["nodes"], p["meets"]) for p in out["probes"]] == [(2, False), (3, True), (4, True)] and out["runs"] == 3


@pytest.mark.parametrize("threshold", range(2, 30))
def test_the_answer_is_the_brute_force_smallest_size_for_any_threshold(threshold):
    out = sizing.search(_scenario(), "shared", _fake(lambda n: n >= threshold))
    assert out["nodes"] == threshold and out["monotone"]
    if threshold == 2:  # the minimum (one node per group): nothing smaller to show
        assert out["one_smaller"] is None
    else:
        assert out["one_smaller"]["nodes"] == threshold - 1 and out["one_smaller"]["tiers_over"] == ["inference"]


def test_a_scenario_too_small_for_its_load_doubles_then_bisects():
    calls: list[int] = []
    out = sizing.search(_scenario(), "shared", _fake(lambda n: n >= 11, calls))
    assert calls == [4, 8, 16, 12, 10, 11]  # its own size, doubled until it meets, then halved back; 12 confirms 11
    assert out["nodes"] == 11 and out["one_smaller"]["nodes"] == 10 and out["monotone"]


def test_a_design_that_never_meets_within_most_nodes_says_so_without_raising():
    calls: list[int] = []
    out = sizing.search(_scenario(), "shared", _fake(lambda n: False, calls), most_nodes=20)
    assert calls == [4, 8, 16, 20]
    assert out["nodes"] is None and out["devices"] is None and out["one_smaller"] is None
    assert out["answer"] == "does not meet at 20 nodes" and out["tiers"] == []


def test_a_larger_size_that_misses_where_a_smaller_met_is_flagged_not_monotone():
    out = sizing.search(_scenario(), "shared", _fake(lambda n: n == 4 or n >= 6))
    assert out["nodes"] == 4 and not out["monotone"]
    assert [(p["nodes"], p["meets"]) for p in out["probes"]] == [(2, False), (3, False), (4, True), (5, False)]


def test_not_established_and_lost_jobs_count_as_not_meeting():
    out = sizing.search(_scenario(), "shared", _fake(lambda n: n >= 3, below="not established"))
    assert out["nodes"] == 3 and out["one_smaller"]["not_established"] == ["inference"]
    assert out["one_smaller"]["tiers_over"] == []
    lost = lambda sc, design: _result(sc, design, lost=0 if sc.nodes >= 5 else 2)  # noqa: E731
    assert sizing.search(_scenario(), "shared", lost)["nodes"] == 5


# -- scaling ----------------------------------------------------------------------------------------------------
def test_scaling_keeps_each_groups_share_and_every_group_at_least_one_node():
    sc = _scenario(groups=((1, "serving", "inference"), (9, "training", "training")))
    assert [g.nodes for g in sizing.scaled(sc, 20).node_groups] == [2, 18]
    assert [g.nodes for g in sizing.scaled(sc, 3).node_groups] == [1, 2]  # 0.3 rounds to 0: one taken from training
    for n in range(2, 80):
        groups = sizing.scaled(sc, n).node_groups
        assert sum(g.nodes for g in groups) == n and min(g.nodes for g in groups) >= 1
        assert abs(groups[1].nodes - n * 0.9) < 1 + (groups[0].nodes == 1)
    with pytest.raises(sizing.SizingError, match="needs at least 2 nodes"):
        sizing.scaled(sc, 1)


def test_the_reserved_count_is_kept_as_written_but_capped_to_leave_a_device_unreserved():
    sc = _scenario(reserved={"inference": 8, "training": 8})
    assert sizing.scaled(sc, 3).designs["reserved"]["devices"] == {"inference": 8, "training": 8}
    assert sizing.scaled(sc, 2).designs["reserved"]["devices"] == {"inference": 8, "training": 7}
    assert sizing.scaled(sc, 2, devices_per_node=4).designs["reserved"]["devices"] == {"inference": 7}
    assert sc.designs["reserved"]["devices"] == {"inference": 8, "training": 8}  # the original is untouched
    probes = sizing.search(sc, "reserved", _fake(lambda n: n >= 3))["probes"]
    assert [(p["nodes"], p["reserved_capped"]) for p in probes] == [(2, True), (3, False), (4, False)]


def test_a_node_too_small_for_a_tiers_job_is_refused_in_one_line():
    with pytest.raises(sizing.SizingError) as e:
        sizing.scaled(_scenario(), 4, devices_per_node=2)
    assert "\n" not in str(e.value) and "tier training needs 4 devices per job" in str(e.value)


# -- the hardware file ------------------------------------------------------------------------------------------
def test_the_sample_hardware_file_is_the_buyers_node_with_partitions_only_recorded():
    hw = sizing.hardware(H100)
    assert (hw["devicesPerNode"], hw["model"], hw["memoryGiB"]) == (8, "NVIDIA H100 80GB HBM3", 80)
    assert "recorded, not simulated" in hw["partitions_note"]


@pytest.mark.parametrize("text, field", [("model: X\n", "devicesPerNode"), ("devicesPerNode: eight\n", "devicesPerNode"),
                                         ("devicesPerNode: 8\npartitions: [1]\n", "partitions.0")])
def test_a_bad_hardware_file_is_one_line_naming_the_file_and_field(tmp_path, text, field):
    path = tmp_path / "node.yaml"
    path.write_text(text)
    with pytest.raises(sizing.HardwareShapeError) as e:
        sizing.hardware(path)
    assert isinstance(e.value, InputError) and "\n" not in str(e.value)
    assert str(e.value).startswith(f"hardware file {path}: {field}: ")


def test_the_command_refuses_a_bad_hardware_file_in_one_line_before_any_cluster(tmp_path):
    bad, narrow = tmp_path / "bad.yaml", tmp_path / "narrow.yaml"
    bad.write_text("model: X\n")
    narrow.write_text("devicesPerNode: 4\n")  # the scenario's training jobs take 8 devices
    for path, says in ((bad, "devicesPerNode: is required"), (narrow, "tier training needs 8 devices per job")):
        result = CliRunner().invoke(main, ["contention", "size", str(SCENARIO), "--hardware", str(path)])
        out = result.output.strip()
        assert result.exit_code == 2 and len(out.splitlines()) == 1 and says in out, out


# -- the answer on disk and in the reports ----------------------------------------------------------------------
def _rows(smallest: int) -> list[dict]:
    return [sizing.search(_scenario(), d, _fake(lambda n: n >= smallest)) for d in ("shared", "pools")]


def test_the_command_prints_one_row_per_design_and_writes_json_and_png_exit_1_when_one_never_meets(tmp_path, monkeypatch):
    """The whole command on a fake cluster: each probe's line, the table, the files, and the exit status."""
    from contextlib import contextmanager

    from dra_harness.cli import sizing as cli

    @contextmanager
    def no_cluster(*args, **kwargs):
        yield None, None, "1.37.2"

    monkeypatch.setattr(cli, "embedded_cluster", no_cluster)
    never_pools = lambda sc, design: _result(sc, design, "meets" if design == "shared" and sc.nodes >= 3 else "misses")  # noqa: E731
    monkeypatch.setattr(cli, "_run_at", lambda *args: never_pools)
    closed = []
    monkeypatch.setattr(cli.SchedulerQueue, "of_embedded", classmethod(lambda cls, cluster: SimpleNamespace(close=lambda: closed.append(1))))
    result = CliRunner().invoke(main, ["contention", "size", str(SCENARIO), "--design", "shared", "--design", "pools",
                                       "--hardware", str(H100), "--out", str(tmp_path), "--most-nodes", "8"])
    out = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert closed == [1]  # the scheduler's kept-alive connection is closed
    assert "shared at 2 nodes (16 devices): does not meet — inference p95 25.0 min (misses)" in out
    assert "NVIDIA H100 80GB HBM3, 8 devices per node" in out and "pools: does not meet at 8 nodes" in out
    assert "partitions 1g.10gb, 3g.40gb, 7g.80gb: MIG-style partitions are recorded, not simulated" in out
    data = json.loads((tmp_path / "contention" / "inference-vs-training-sizing.json").read_text())
    assert "scenario seconds" in data["time_unit"] and data["hardware"]["model"] == "NVIDIA H100 80GB HBM3"
    assert [(r["design"], r["nodes"], r["devices"]) for r in data["rows"]] == [("shared", 3, 24), ("pools", None, None)]
    assert (tmp_path / "contention" / data["plot"]).read_bytes().startswith(b"\x89PNG")


def _run_with_sizing(run_dir: Path, smallest: int) -> Path:
    make_run(run_dir, contention_scale=None)
    (run_dir / "contention").mkdir()
    (run_dir / "contention" / "sizing-sizing.json").write_text(json.dumps(
        {"scenario": "sizing", "kind": "sizing", "hardware": {"model": "H100"}, "rows": _rows(smallest), "plot": "none.png"}))
    return run_dir


def test_the_signoff_report_shows_the_size_needed_with_the_design_record(tmp_path):
    run = _run_with_sizing(tmp_path / "run", 3)
    (run / "contention" / "other-sizing.json").write_text(json.dumps({"scenario": "other", "rows": [{"design": "shared"}]}))
    summary = build_summary(run)
    assert [d["scenario"] for d in summary["contention"]["sizing"]] == ["sizing"]
    assert summary["contention"]["results"] == []
    assert summary["contention"]["unreadable"] == [{"file": "contention/other-sizing.json",
                                                    "problem": "a sizing row lacks design or nodes or devices"}]
    md = render.markdown(summary)
    assert "### Size needed" in md
    assert "| sizing | shared | H100, 8 devices per node | 3 | 24 | inference p95 2 min (tolerable 10 min); " in md
    assert "| 2 nodes: inference over, 5 jobs over | 3 |" in md
    assert "Size needed</h3>" in render.html(summary, run)


def test_compare_shows_two_sizing_runs_side_by_side(tmp_path):
    base, cand = compare.load_runs([_run_with_sizing(tmp_path / "base", 3), _run_with_sizing(tmp_path / "cand", 4)])
    rows = [r for r in compare.build([base, cand], ["base", "candidate"])["contention"] if r["tier"] == "size needed"]
    assert [(r["design"], r["differs"], [c["text"] for c in r["cells"]]) for r in rows] == [
        ("shared", True, ["3 nodes / 24 devices", "4 nodes / 32 devices"]),
        ("pools", True, ["3 nodes / 24 devices", "4 nodes / 32 devices"])]
    md = compare.render.compare_markdown(compare.build([base, cand], ["base", "candidate"]))
    assert "| ≠ sizing | shared | size needed | **3 nodes / 24 devices** | **4 nodes / 32 devices** |" in md
