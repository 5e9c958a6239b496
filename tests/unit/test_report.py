"""The sign-off report's logic on synthetic run directories: render, design record, redaction."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dra_harness.cli.app import main
from dra_harness.report import write_report
from dra_harness.report.design import DesignFileError, load_design
from dra_harness.report.fingerprint import feature_gates, parse_feature_metrics
from dra_harness.report.results import slug
from dra_harness.report.summary import RunDirError, build_summary
from tests.unit.report_runs import make_run

EXAMPLE_DESIGN = Path(__file__).resolve().parents[2] / "fixtures/designs/example.yaml"


def test_the_html_report_is_one_self_contained_file_with_embedded_plots(tmp_path):
    run = make_run(tmp_path / "run")
    html = write_report(run).read_text()
    assert "Verdict: PASS" in html
    # No external asset of any kind: every image is a data URI, no stylesheet or script is fetched.
    assert not re.search(r"""(src|href)=["'](https?:|//)""", html)
    assert "<link" not in html and "<script" not in html
    images = re.findall(r'<img[^>]+src="([^"]+)"', html)
    assert len(images) >= 4 and all(src.startswith("data:image/png;base64,") for src in images)
    # The contention comparison: every tier of every design, and the preemption verdict.
    assert html.count("inference-vs-training") >= 4 and "no device was freed by preemption" in html
    summary = json.loads((run / "summary.json").read_text())
    assert {"fingerprint", "results", "findings", "measurements", "concerns", "vendor_questions"} <= set(summary)
    assert [f for f in summary["findings"] if "interactive misses" in f["message"]]


def test_without_contention_results_the_report_says_contention_not_run(tmp_path):
    run = make_run(tmp_path / "run", contention_scale=None)
    html = write_report(run).read_text()
    assert "Contention not run" in html
    assert "Contention not run" in (run / "signoff.md").read_text()


def test_a_malformed_contention_file_is_reported_not_guessed(tmp_path):
    run = make_run(tmp_path / "run")
    (run / "contention" / "broken-shared.json").write_text(json.dumps({"scenario": "broken"}))
    (run / "contention" / "inference-vs-training-shared-raw.json").write_text(json.dumps({"jobs": []}))
    summary = build_summary(run)
    assert len(summary["contention"]["unreadable"]) == 1  # the raw samples beside a result are not a result
    assert summary["contention"]["unreadable"][0]["file"] == "contention/broken-shared.json"
    assert "missing" in summary["contention"]["unreadable"][0]["problem"]


def test_a_run_that_did_not_finish_is_marked_incomplete(tmp_path):
    run = make_run(tmp_path / "run", complete=False)
    assert build_summary(run)["verdict"] == "INCOMPLETE"
    assert "Verdict: INCOMPLETE" in write_report(run).read_text()


def test_a_failed_check_fails_the_verdict_and_becomes_a_finding(tmp_path):
    tests = [("allocation", "test_a_capacity_selector_is_honoured", "failed", 1.0, [])]
    summary = build_summary(make_run(tmp_path / "run", tests=tests, contention_scale=None))
    assert summary["verdict"] == "FAIL"
    assert summary["findings"][0]["severity"] == "failure" and "assert 3 == 4" in summary["findings"][0]["message"]


def test_not_a_run_directory_is_one_line_error(tmp_path):
    with pytest.raises(RunDirError, match="not a run directory"):
        build_summary(tmp_path)
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    # (rich wraps the one line at the test terminal's width)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "is not a run directory" in " ".join(result.output.split())


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("run.json", "[]", "(top level): is a list, not a JSON object"),
        ("fingerprint.json", b"\x00\x01", "is binary (it contains NUL bytes), not text"),
        ("fingerprint.json", '{"drivers": {"name": "gpu.example.com"}}', "drivers: must be a list, not a mapping"),
        ("design.json", '{"name": "d"}', "(top level): 'sharingMode' is a required property"),
        ("evidence.jsonl", '{"test": "a", "outcome": "passed"}\n[1, 2]\n', "line 2: not an evidence record"),
        ("evidence.jsonl", b"\xff\xfe\n", "is not UTF-8 text"),
    ],
)
def test_a_malformed_file_in_a_run_directory_is_one_line_naming_it(tmp_path, name, content, message):
    run = make_run(tmp_path / "run")
    build_summary(run)  # control: the same run renders before the file is spoiled
    path = run / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(RunDirError) as e:
        build_summary(run)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value) and "\n" not in str(e.value)


def test_an_evidence_line_cut_by_a_killed_run_is_skipped(tmp_path):
    run = make_run(tmp_path / "run")
    with open(run / "evidence.jsonl", "a") as f:
        f.write('{"test": "suites/test_x.py::test_cut", "outc')
    assert build_summary(run)["verdict"] == "PASS"


def test_the_design_record_is_compared_point_by_point(tmp_path):
    run = make_run(tmp_path / "run")
    (run / "design.json").write_text(json.dumps(load_design(EXAMPLE_DESIGN)))
    points = {p["point"]: p for p in build_summary(run)["design"]["comparison"]}
    assert points["sharing mode"]["status"] == "consistent"
    assert points["class interactive"]["status"] == "consistent"  # reserved design: p95 45 s <= 5 m
    assert points["preemption"]["status"] == "consistent"
    # The same run with waits x10 contradicts the interactive class's 5 minutes.
    slow = make_run(tmp_path / "slow", contention_scale=10)
    (slow / "design.json").write_text(json.dumps(load_design(EXAMPLE_DESIGN)))
    points = {p["point"]: p for p in build_summary(slow)["design"]["comparison"]}
    assert points["class interactive"]["status"] == "contradicted"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"sharingMode": "sometimes"}, "sharingMode: must be one of 'exclusive'"),
        ({"workloadClasses": []}, "workloadClasses: must not be empty"),
        ({"workloadClasses": [{"name": "a", "priority": 1, "tolerableWait": "soon"}]}, "workloadClasses.0.tolerableWait"),
        ({"poolDesign": {"kind": "reserved", "reservedDevices": -1}}, "poolDesign.reservedDevices"),
        ({"extra": 1}, "Additional properties are not allowed"),
        ({"workloadClasses": [{"name": "a", "priority": 1, "tolerableWait": "1m"}] * 2}, "a class name appears twice"),
    ],
)
def test_an_invalid_design_file_is_rejected_in_one_line(tmp_path, change, message):
    data = {**yaml.safe_load(EXAMPLE_DESIGN.read_text()), **change}
    path = tmp_path / "design.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(DesignFileError) as e:
        load_design(path)
    assert message in str(e.value) and "\n" not in str(e.value) and str(path) in str(e.value)


def test_run_rejects_a_bad_design_file_before_starting_anything(tmp_path):
    bad = tmp_path / "d.yaml"
    bad.write_text("name: [unclosed\n")
    result = CliRunner().invoke(main, ["run", "--design-file", str(bad), "--report-dir", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "is not valid YAML" in " ".join(result.output.split()) and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_feature_gates_come_from_the_metric_and_say_unknown_when_unreadable():
    text = (
        '# TYPE kubernetes_feature_enabled gauge\n'
        'kubernetes_feature_enabled{name="DRADeviceTaints",stage="BETA"} 1\n'
        'kubernetes_feature_enabled{name="DRAConsumableCapacity",stage="ALPHA"} 0\n'
        'kubernetes_feature_enabled{name="DynamicResourceAllocation",stage=""} 1\n'
        'kubernetes_feature_enabled{name="SidecarContainers",stage=""} 1\n'
    )
    assert parse_feature_metrics(text) == {
        "DRAConsumableCapacity": {"enabled": False, "stage": "ALPHA"},
        "DRADeviceTaints": {"enabled": True, "stage": "BETA"},
        "DynamicResourceAllocation": {"enabled": True, "stage": "GA"},
    }
    # A gate counts as on only where every readable component has it on.
    read = feature_gates({"a": lambda: text, "b": lambda: text.replace('"DRADeviceTaints",stage="BETA"} 1', '"DRADeviceTaints",stage="BETA"} 0')})
    assert read["enabled"] == ["DynamicResourceAllocation"]

    def forbidden() -> str:
        raise PermissionError("403 Forbidden: /metrics")

    unknown = feature_gates({"kube-apiserver": forbidden})
    assert unknown["status"] == "unknown" and "403 Forbidden" in unknown["reason"]


def test_a_direct_pytest_run_renders_from_its_junit_and_evidence(tmp_path):
    run = make_run(tmp_path / "run", contention_scale=None)
    (run / "run.json").unlink()
    (run / "fingerprint.json").unlink()
    summary = build_summary(run)
    assert summary["verdict"] == "PASS" and summary["fingerprint"] == {"error": "no fingerprint recorded"}
    assert "Verdict: PASS" in write_report(run).read_text()


def test_tests_that_differ_past_the_readable_cut_get_their_own_dump_name():
    long = "suites/test_driver_restart.py::test_running_pods_keep_their_devices_across_a_restart"
    graceful, sigkill = slug(f"{long}[graceful]"), slug(f"{long}[sigkill]")
    assert graceful != sigkill and graceful.startswith("test-running-pods-keep-their-d-")
    assert len(graceful) <= 39 and re.fullmatch(r"[a-z0-9-]+", graceful)  # a namespace name's and a label value's part
    # The plugin's nodeid and the one read back from junit.xml differ in the path before the module, not in the slug.
    assert slug("suites/test_x.py::test_y[a]") == slug("/abs/site-packages/dra_harness/suites/test_x.py::test_y[a]")
    assert slug("suites/test_x.py::test_y") != slug("suites/test_z.py::test_y")


def test_report_refuses_a_directory_with_only_a_corrupt_summary_json(tmp_path):
    (tmp_path / "summary.json").write_text('{"verdict": ')
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    # It used to count summary.json as a sign of a run: an INCOMPLETE report was written beside it, exit 0.
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "is not a run directory" in " ".join(result.output.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
    assert (tmp_path / "summary.json").read_text() == '{"verdict": '


def test_report_renders_a_directory_pytest_wrote_whatever_its_stale_summary(tmp_path):
    # Control: the same corrupt summary beside pytest's junit.xml and evidence is a run directory; it is rebuilt.
    run = make_run(tmp_path / "run", contention_scale=None)
    (run / "run.json").unlink()
    (run / "summary.json").write_text('{"verdict": ')
    result = CliRunner().invoke(main, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert json.loads((run / "summary.json").read_text())["verdict"] == "PASS"
