"""The run verdict: PASS needs an established pass in every concern that ran; "nothing failed" is not enough."""

from __future__ import annotations

import json

from dra_harness.report import write_report
from dra_harness.report.render import VERDICT_COLOURS
from dra_harness.report.results import NOT_ESTABLISHED
from dra_harness.report.summary import build_summary
from tests.unit.report_runs import DEFAULT_TESTS, make_run

ALL_SKIPPED = [(m, n, "skipped", s, r) for m, n, o, s, r in DEFAULT_TESTS]
TAINTS_SKIPPED = [(m, n, "skipped" if m == "device_taints" else o, s, r) for m, n, o, s, r in DEFAULT_TESTS]


def _old_rule_says_pass(summary: dict) -> bool:
    """The rule this replaced: PASS whenever a complete run had results and nothing failed."""
    c = summary["counts"]
    return summary["complete"] and bool(summary["results"]) and not (c.get("failed", 0) + c.get("error", 0))


def test_a_run_with_only_skipped_checks_is_partial_not_pass(tmp_path):
    summary = build_summary(make_run(tmp_path / "run", tests=ALL_SKIPPED, contention_scale=None))
    assert _old_rule_says_pass(summary)  # negative control: the old verdict would have been PASS here
    assert summary["verdict"] == "PARTIAL"
    assert summary["verdict_reason"].startswith(f"0 checks passed, {len(DEFAULT_TESTS)} skipped; no check passed in ")
    assert "Inventory (0 passed, 1 skipped)" in summary["verdict_reason"]
    assert "Sharing and isolation (0 passed, 2 skipped)" in summary["verdict_reason"]


def test_one_concern_with_only_skipped_checks_makes_the_run_partial_and_is_named(tmp_path):
    summary = build_summary(make_run(tmp_path / "run", tests=TAINTS_SKIPPED, contention_scale=None))
    assert _old_rule_says_pass(summary)
    assert summary["verdict"] == "PARTIAL"
    assert summary["verdict_reason"] == (f"{len(DEFAULT_TESTS) - 1} checks passed, 1 skipped; "
                                         "no check passed in Device taints (0 passed, 1 skipped)")


def test_a_concern_with_a_pass_beside_skips_does_not_stop_a_pass(tmp_path):
    # Control: the check can pass. One of sharing's two checks skipped, the other passed.
    tests = [(m, n, "skipped" if n == "test_no_existing_claim_is_shared_across_tenants" else o, s, r)
             for m, n, o, s, r in DEFAULT_TESTS]
    summary = build_summary(make_run(tmp_path / "run", tests=tests, contention_scale=None))
    assert summary["verdict"] == "PASS" and summary["verdict_reason"] == f"{len(DEFAULT_TESTS) - 1} checks passed, 1 skipped"
    assert build_summary(make_run(tmp_path / "all", contention_scale=None))["verdict"] == "PASS"


def test_a_concern_only_not_established_is_partial_and_never_failed(tmp_path):
    observed = [(m, n, o, s, [{"expected_source": "observed"}] if m == "inventory" else r) for m, n, o, s, r in DEFAULT_TESTS]
    summary = build_summary(make_run(tmp_path / "run", tests=observed, contention_scale=None))
    assert _old_rule_says_pass(summary)
    assert summary["verdict"] == "PARTIAL" and summary["counts"].get("failed") is None
    assert f"no check passed in Inventory (0 passed, 1 {NOT_ESTABLISHED})" in summary["verdict_reason"]


def test_a_failure_beside_an_unproven_concern_is_still_fail(tmp_path):
    tests = [(m, n, "failed" if m == "allocation" else o, s, r) for m, n, o, s, r in TAINTS_SKIPPED]
    assert build_summary(make_run(tmp_path / "run", tests=tests, contention_scale=None))["verdict"] == "FAIL"


def test_a_partial_run_renders_amber_with_its_reason(tmp_path):
    run = make_run(tmp_path / "run", tests=TAINTS_SKIPPED, contention_scale=None)
    html = write_report(run).read_text()
    assert "Verdict: PARTIAL" in html and f"#verdict{{background:{VERDICT_COLOURS['PARTIAL']};" in html
    assert "**Verdict: PARTIAL** — " in (run / "signoff.md").read_text()
    assert json.loads((run / "summary.json").read_text())["verdict"] == "PARTIAL"
