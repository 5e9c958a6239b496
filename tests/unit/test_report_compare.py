"""Several runs side by side: which rows differ, how figures read, and the command's bad-input paths."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from dra_harness.cli.app import main
from dra_harness.report import compare, readable, write_report
from dra_harness.report.summary import build_summary
from tests.unit.report_runs import DATA, DEFAULT_TESTS, make_run

TAINT = "suites/test_device_taints.py::test_a_no_execute_taint_evicts_the_pods_using_the_device"
DRAIN = "suites/test_node_drain.py::test_draining_a_node_frees_its_devices_and_replacements_get_new_ones_elsewhere"
RECORDED = DATA / "recorded"


def _table(tmp_path, *runs_kw, names=None):
    summaries = [build_summary(make_run(tmp_path / f"run{i}", **kw)) for i, kw in enumerate(runs_kw)]
    return compare.build(summaries, names)


def _row(table, nodeid):
    return next(r for c in table["concerns"] for r in c["rows"] if r["nodeid"] == nodeid)


def _with(test_name, outcome=None, records=None):
    """DEFAULT_TESTS with one test's outcome or records replaced."""
    return [(m, n, outcome or o, s, r if records is None else records) if n == test_name else (m, n, o, s, r)
            for m, n, o, s, r in DEFAULT_TESTS]


def _drain_after(seconds):
    return _with(DRAIN.rpartition("::")[2], records=[{"node": "gpu-node-0", "devices_free_after_s": seconds}])


def test_checks_are_matched_across_runs_by_nodeid_parametrized_ids_included(tmp_path):
    graceful = ("driver_restart", "test_a_restarted_driver_republishes_the_same_devices[graceful]", "passed", 4.0, [{"back_after_s": 0.02}])
    sigkill = ("driver_restart", "test_a_restarted_driver_republishes_the_same_devices[sigkill]", "passed", 4.0, [{"back_after_s": 0.03}])
    t = _table(tmp_path, {"tests": [graceful, sigkill]}, {"tests": [sigkill, graceful]})
    (restart,) = [c for c in t["concerns"] if c["id"] == "driver-restart"]
    assert [r["check"] for r in restart["rows"]] == ["a restarted driver republishes the same devices [graceful]",
                                                     "a restarted driver republishes the same devices [sigkill]"]
    assert all(None not in r["cells"] and not r["differs"] for r in restart["rows"])
    assert [f["text"] for f in _row(t, "suites/test_driver_restart.py::" + sigkill[1])["cells"][1]["figures"]] == ["30 ms"]
    # Concerns in the report's order, each check once.
    assert [c["id"] for c in _table(tmp_path / "d", {}, {})["concerns"]] == ["inventory", "allocation", "sharing", "node-drain", "device-taints"]


def test_a_check_that_failed_only_in_one_run_is_highlighted(tmp_path):
    t = _table(tmp_path, {}, {"tests": _with(TAINT.rpartition("::")[2], outcome="failed")})
    row = _row(t, TAINT)
    assert row["differs"] and row["outcomes_differ"]
    assert [c["outcome"] for c in row["cells"]] == ["passed", "failed"]
    assert row["cells"][1]["message"] == "assert 3 == 4" and row["cells"][0]["message"] == ""
    assert t["differ"] == 1 and not _row(t, DRAIN)["differs"]
    md = compare.render.compare_markdown(t)
    assert "| ≠ a no execute taint evicts the pods using the device | **passed** · evicted after 1.5 s | **failed** ·" in md
    html = compare.render.compare_html(t)
    assert re.search(r'<tr class="differs"><td><span class="mark"[^>]*>≠</span> a no execute taint', html)


def test_a_check_missing_from_one_run_shows_absent(tmp_path):
    t = _table(tmp_path, {}, {"tests": [x for x in DEFAULT_TESTS if x[0] != "device_taints"]})
    row = _row(t, TAINT)
    assert row["differs"] and row["cells"][1] is None
    assert "| **passed** · evicted after 1.5 s | **absent** |" in compare.render.compare_markdown(t)
    assert '<td class="absent">absent</td>' in compare.render.compare_html(t)


def test_a_timing_that_doubled_is_highlighted_while_a_five_percent_change_is_not(tmp_path):
    doubled = _row(_table(tmp_path / "x2", {"tests": _drain_after(2.0)}, {"tests": _drain_after(4.0)}), DRAIN)
    assert doubled["differs"] and [f["differs"] for c in doubled["cells"] for f in c["figures"]] == [True, True]
    assert [f["text"] for c in doubled["cells"] for f in c["figures"]] == ["2 s", "4 s"]
    five = _row(_table(tmp_path / "x105", {"tests": _drain_after(4.0)}, {"tests": _drain_after(4.2)}), DRAIN)
    assert not five["differs"]
    # Under the absolute threshold a doubling is noise: 0.2 s -> 0.4 s.
    assert not _row(_table(tmp_path / "small", {"tests": _drain_after(0.2)}, {"tests": _drain_after(0.4)}), DRAIN)["differs"]


def test_a_count_that_differs_is_highlighted(tmp_path):
    name = "test_a_claim_for_several_devices_gets_distinct_devices_on_one_node"
    t = _table(tmp_path, {}, {"tests": _with(name, records=[{"count": 2, "node": "gpu-node-1"}])})
    row = _row(t, f"suites/test_allocation.py::{name}")
    assert row["differs"] and "**count 2**" in compare.render.compare_markdown(t)
    # A figure only one run recorded differs too.
    t = _table(tmp_path / "extra", {}, {"tests": _with(name, records=[{"count": 4, "node": "gpu-node-1", "retries": 1}])})
    row = _row(t, f"suites/test_allocation.py::{name}")
    assert row["differs"] and [(f["label"], f["differs"]) for f in row["cells"][1]["figures"]] == [("count", False), ("retries", True)]


def test_the_provenance_row_comes_first_and_an_older_run_without_one_says_so(tmp_path):
    old = build_summary(make_run(tmp_path / "old", k8s="v1.36.3"))
    del old["provenance"]  # a summary.json written before runs recorded it
    new = build_summary(make_run(tmp_path / "new"))
    new["provenance"] = {"sentence": "on simulated devices: 8 devices from the example driver on 2 simulated (KWOK) nodes; "
                                     "containers on 1 real node; no GPU", "nodes": {"simulated": 2, "real": 1, "kind": 0},
                         "drivers": [{"name": "gpu.example.com", "source": "example driver"}], "gpu": False}
    t = compare.build([old, new])
    assert t["header"][0] == {"name": "provenance", "differs": True, "by_run": [
        "not recorded in this run", new["provenance"]["sentence"]]}
    assert t["header"][4]["by_run"][1] == "gpu.example.com 1.0.0, build v0.4.0 (example driver)"
    md_rows = [line for line in compare.render.compare_markdown(t).splitlines() if line.startswith("| ")]
    assert md_rows[1].startswith("| ≠ **provenance** | **not recorded in this run** | **on simulated devices: 8 devices")
    html = compare.render.compare_html(t)
    first = re.search(r"<h2 id=\"runs\">Runs</h2>\s*<table>\s*<tr>.*?</tr>\s*<tr ([^>]*)><th>(.*?)</th>", html, re.S)
    assert first and "provenance" in first.group(1) and first.group(2).endswith("provenance")
    assert "containers on 1 real node; no GPU" in html


def test_markdown_and_html_both_show_the_runs_kubernetes_versions(tmp_path):
    t = _table(tmp_path, {"k8s": "v1.36.3"}, {"k8s": "v1.37.2"}, names=["today", "candidate"])
    for text in (compare.render.compare_markdown(t), compare.render.compare_html(t)):
        assert "v1.36.3" in text and "v1.37.2" in text and "today" in text and "candidate" in text
    assert next(h for h in t["header"] if h["name"] == "Kubernetes")["differs"]
    assert not next(h for h in t["header"] if h["name"] == "run")["differs"]


NESTED = [
    ("allocation", "test_first_available_prefers_the_first_alternative", "passed", 1.7,
     [{"chosen": {"p0": "gpu/preferred", "p1": "gpu/fallback"}, "per_shard": {"shards_running": {"a": 4}}}]),
    ("device_taints", "test_a_toleration_in_the_claim_request_lets_a_pod_through", "passed", 0.7,
     [{"tolerations": [{"key": "dra-harness.io/out-of-service", "operator": "Exists"}], "slice_events": [[0.1, "DELETED", "s-1"]],
       "condition": {"type": "DisruptionTarget", "lastProbeTime": None}, "kill": True, "empty": {}}]),
]


def _evidence_cells(html: str) -> list[str]:
    return re.findall(r'<div class="evidence">(.*?)</div>', html, re.S)


def test_no_evidence_cell_of_the_html_shows_a_json_brace(tmp_path):
    html = compare.render.compare_html(_table(tmp_path, {"tests": NESTED}, {"tests": NESTED}))
    cells = _evidence_cells(html)
    assert len(cells) == 4 and not any(c in cell for cell in cells for c in "{}[]")
    assert "chosen: p0 gpu/preferred, p1 gpu/fallback · per shard: shards running: a 4" in cells[0]
    assert ("tolerations: (key dra-harness.io/out-of-service, operator Exists) · slice events: (0.1, DELETED, s-1) · "
            "condition: type DisruptionTarget, lastProbeTime none · kill: yes · empty: none") in cells[2]


def test_the_runs_own_evidence_sentences_are_shown_when_it_has_them(tmp_path):
    a, b = (build_summary(make_run(tmp_path / n, contention_scale=None)) for n in "ab")
    b["results"][-1]["evidence_text"] = ["The pod was evicted 1.5 s after the taint."]
    b["results"][-1]["provenance"] = {"text": "pods on 1 real node; devices from the example driver"}
    html = compare.render.compare_html(compare.build([a, b]))
    assert "The pod was evicted 1.5 s after the taint." in _evidence_cells(html)
    assert "device: gpu-node-2/gpu-3 · evicted after: 1.5 s" in _evidence_cells(html)  # run a: its records, as text
    assert "pods on 1 real node; devices from the example driver" in html


def test_contention_waits_read_in_scenario_minutes_and_hours_and_a_new_miss_is_highlighted(tmp_path):
    t = _table(tmp_path, {}, {"contention_scale": 1.5}, {"contention_scale": None})
    training = next(r for r in t["contention"] if (r["design"], r["tier"]) == ("reserved", "training"))
    assert training["differs"] and training["cells"][2] is None
    assert [(c["text"], c["verdict"]) for c in training["cells"][:2]] == [("1.5 h", "meets"), ("2.25 h", "misses")]
    md = compare.render.compare_markdown(t)
    assert "| ≠ inference-vs-training | reserved | training | **1.5 h · meets** | **2.25 h · misses** | *not run* |" in md
    # 45 s -> 67.5 s is over 25 % but under 60 scenario seconds: not a difference between the first two.
    same = _table(tmp_path / "two", {}, {"contention_scale": 1.5})
    assert not next(r for r in same["contention"] if (r["design"], r["tier"]) == ("reserved", "interactive"))["differs"]


@pytest.mark.parametrize("seconds, text", [(0.0064, "6.4 ms"), (0.111, "111 ms"), (4.478, "4.48 s"), (90, "90 s"),
                                           (720, "12 min"), (5400, "90 min"), (8100, "2.25 h"), (0, "0 s")])
def test_a_duration_reads_in_the_unit_of_its_magnitude(seconds, text):
    assert readable.duration(seconds) == text


def test_a_row_reads_in_one_unit(tmp_path):
    row = _row(_table(tmp_path, {"tests": _drain_after(0.9)}, {"tests": _drain_after(1.6)}), DRAIN)
    assert [f["text"] for c in row["cells"] for f in c["figures"]] == ["0.9 s", "1.6 s"]


def test_the_same_run_twice_gets_two_column_titles(tmp_path):
    run = make_run(tmp_path / "run", contention_scale=None)
    t = compare.build(compare.load_runs([run, run]))
    assert [r["label"] for r in t["runs"]] == ["run", "run #2"] and t["differ"] == 0


def test_the_recorded_1_36_3_and_1_37_2_runs_side_by_side():
    t = compare.build(compare.load_runs([RECORDED / "summary-1.36.3.json", RECORDED / "summary-1.37.2.json"]), ["1.36.3", "1.37.2"])
    differs = {h["name"] for h in t["header"] if h["differs"]}
    assert differs == {"Kubernetes", "DRA feature gates"}
    assert t["checks"] == 43 and 0 < t["differ"] < 10
    html = compare.render.compare_html(t)
    assert not any(c in cell for cell in _evidence_cells(html) for c in "{}")


def test_the_compare_command_writes_html_and_markdown_and_prints_the_html_path(tmp_path):
    a = make_run(tmp_path / "a", k8s="v1.36.3", contention_scale=None)
    b = make_run(tmp_path / "b", contention_scale=None)
    write_report(b)
    out = tmp_path / "cmp"
    # A summary.json is a run, as for diff.
    result = CliRunner().invoke(main, ["compare", str(a), str(b / "summary.json"), "--out", str(out),
                                       "--label", "base", "--label", "candidate"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(out / "compare.html")
    assert "| ≠ **Kubernetes** | **v1.36.3** | **v1.37.2** |" in (out / "compare.md").read_text()
    assert "<th>candidate</th>" in (out / "compare.html").read_text()


@pytest.mark.parametrize("args, message", [
    (["{a}"], "compare needs at least two runs, got 1"),
    (["{a}", "{missing}"], "{missing} does not exist"),
    (["{a}", "{empty}"], "{empty} is not a run directory"),
    (["{a}", "{malformed}"], "summary {malformed}/summary.json: results: must be a list, not a string"),
    (["{a}", "{foreign}"], "summary of {foreign}: results.0.evidence_text: must be a list or null, not a string"),
    (["{a}", "{a}", "--label", "only-one"], "1 --label for 2 runs: give one per run, or none"),
])
def test_the_compare_command_refuses_bad_input_in_one_line_naming_it(tmp_path, args, message):
    paths = {"a": make_run(tmp_path / "a", contention_scale=None), "missing": tmp_path / "missing", "empty": tmp_path / "empty",
             "malformed": make_run(tmp_path / "malformed", contention_scale=None), "foreign": make_run(tmp_path / "foreign", contention_scale=None)}
    (tmp_path / "empty").mkdir()
    (paths["malformed"] / "summary.json").write_text('{"results": "none"}')
    foreign = build_summary(paths["foreign"])
    foreign["results"][0]["evidence_text"] = "x"
    (paths["foreign"] / "summary.json").write_text(json.dumps(foreign))
    result = CliRunner().invoke(main, ["compare", *(a.format(**paths) for a in args), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert " ".join(result.output.split()).startswith("error: " + message.format(**paths))
    assert not (tmp_path / "out").exists()
