"""``diff`` and ``compare`` read a run's summary.json only while it is newer than the run's own files."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

from dra_harness.cli.app import main
from dra_harness.report import write_report
from dra_harness.report.diff import load, read_summary
from dra_harness.report.summary import newer_than_summary
from tests.unit.report_runs import DEFAULT_TESTS, _junit, make_run

FAILING = [(m, n, "failed" if m == "device_taints" else o, s, r) for m, n, o, s, r in DEFAULT_TESTS]


def _later(path: Path, than: Path, by_s: int = 5) -> None:
    """Give ``path`` an mtime ``by_s`` after ``than``'s: a file system's clock granularity must not decide the test."""
    t = than.stat().st_mtime + by_s
    os.utime(path, (t, t))


def _rendered_then_failed(run: Path) -> Path:
    """A run rendered as PASS whose junit.xml was then rewritten with a failure (pytest run again into it)."""
    make_run(run, contention_scale=None)
    write_report(run)
    (run / "junit.xml").write_text(_junit(FAILING))
    _later(run / "junit.xml", run / "summary.json")
    return run


def test_a_summary_older_than_junit_xml_is_rebuilt_not_trusted(tmp_path):
    run = _rendered_then_failed(tmp_path / "run")
    assert newer_than_summary(run) == "junit.xml"
    # Negative control: the summary on disk still says PASS; the old load returned it.
    assert read_summary(run / "summary.json")["verdict"] == "PASS"
    assert load(run)["verdict"] == "FAIL"
    assert load(run / "summary.json")["verdict"] == "FAIL"  # named as a file, it is the same run's summary


def test_newer_evidence_or_contention_files_also_make_it_stale(tmp_path):
    run = make_run(tmp_path / "run")
    write_report(run)
    assert newer_than_summary(run) is None
    for rel in ("evidence.jsonl", "contention/inference-vs-training-shared.json"):
        _later(run / rel, run / "summary.json")
        assert newer_than_summary(run) == rel
        os.utime(run / rel, (0, 0))


def test_files_the_render_itself_writes_after_the_summary_do_not(tmp_path):
    run = make_run(tmp_path / "run", contention_scale=None)
    (run / "allure-results").mkdir()
    (run / "allure-results" / "1-result.json").write_text("{}")
    write_report(run)
    for rel in ("signoff.html", "signoff.md", "allure-results/environment.properties"):
        _later(run / rel, run / "summary.json")
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "run_id": "read-from-summary"}))
    assert newer_than_summary(run) is None and load(run)["run_id"] == "read-from-summary"


def test_the_diff_gate_fails_on_a_stale_pass_whose_junit_xml_now_fails(tmp_path):
    base = make_run(tmp_path / "base", contention_scale=None)
    write_report(base)
    cand = _rendered_then_failed(tmp_path / "cand")
    out = CliRunner().invoke(main, ["diff", str(base), str(cand)])
    assert out.exit_code == 1 and "new failure: suites/test_device_taints.py::" in out.output, out.output
    assert json.loads((cand / "summary.json").read_text())["verdict"] == "PASS"  # diff reads, never rewrites
