"""``diff --accept-missing PATTERN``: only the checks a glob names are accepted, each pattern says what it accepted."""

from __future__ import annotations

import json

from click.testing import CliRunner

from dra_harness.cli.app import main
from dra_harness.report.diff import accepting, compare
from dra_harness.report.summary import build_summary
from tests.unit.report_runs import DEFAULT_TESTS, make_run

TAINT = "suites/test_device_taints.py::test_a_no_execute_taint_evicts_the_pods_using_the_device"
DRAIN = "suites/test_node_drain.py::test_draining_a_node_frees_its_devices_and_replacements_get_new_ones_elsewhere"
#: The candidate skipped both the taint and the drain check, and dropped the tenant audit.
CANDIDATE = [(m, n, "skipped" if m in ("device_taints", "node_drain") else o, s, r)
             for m, n, o, s, r in DEFAULT_TESTS if n != "test_no_existing_claim_is_shared_across_tenants"]


def _runs(tmp_path):
    return (make_run(tmp_path / "base", contention_scale=None),
            make_run(tmp_path / "cand", tests=CANDIDATE, contention_scale=None))


def test_a_pattern_accepts_only_the_missing_checks_it_matches(tmp_path):
    base, cand = (build_summary(r) for r in _runs(tmp_path))
    d = compare(base, cand, accept_missing=("suites/test_device_taints.py::*",))
    # Negative control: the old flag accepted every missing check at once, so this gate would have passed.
    assert d.failed and d.accepted == {"suites/test_device_taints.py::*": [TAINT]}
    assert any(r.startswith(f"check no longer passes: {DRAIN}") for r in d.regressions)
    assert not any(TAINT in r for r in d.regressions)
    # The lower count is accepted only when every absent check is named: the tenant audit is not.
    assert any(r.startswith("fewer checks in candidate: 6 -> 5 (1 absent checks match no --accept-missing pattern")
               for r in d.regressions)


def test_patterns_are_repeatable_and_together_accept_everything_they_name(tmp_path):
    base, cand = (build_summary(r) for r in _runs(tmp_path))
    patterns = ("suites/test_device_taints.py::*", "*::test_draining_*", "suites/test_sharing.py::test_no_existing_*", "*gpu*")
    d = compare(base, cand, accept_missing=patterns)
    assert not d.failed, d.regressions
    assert d.accepted == {patterns[0]: [TAINT], patterns[1]: [DRAIN],
                          patterns[2]: ["suites/test_sharing.py::test_no_existing_claim_is_shared_across_tenants"], patterns[3]: []}
    # Control: without a pattern the same candidate fails the gate: three checks and the count.
    assert len(compare(base, cand).regressions) == 4


def test_a_glob_is_matched_on_the_whole_nodeid_case_sensitively():
    assert accepting(["suites/test_device_taints.py::*"], TAINT) == "suites/test_device_taints.py::*"
    assert accepting(["test_device_taints"], TAINT) is None  # not a substring search
    assert accepting(["SUITES/*"], TAINT) is None
    assert accepting(["suites/test_node_drain.py::*", "*"], TAINT) == "*"


def test_the_diff_command_prints_what_each_pattern_accepted(tmp_path):
    base, cand = _runs(tmp_path)
    out = CliRunner().invoke(main, ["diff", str(base), str(cand), "--accept-missing", "suites/test_device_taints.py::*",
                                    "--accept-missing", "*::test_draining_*", "--accept-missing", "*nothing*"])
    assert out.exit_code == 1, out.output  # the dropped tenant audit is still not accepted
    assert f"--accept-missing suites/test_device_taints.py::*: accepted 1 check\n  - {TAINT}\n" in out.output
    assert f"--accept-missing *::test_draining_*: accepted 1 check\n  - {DRAIN}\n" in out.output
    assert "--accept-missing *nothing*: accepted 0 checks (it matched no check that no longer ran)" in out.output
    as_json = CliRunner().invoke(main, ["diff", str(base), str(cand), "--json", "--accept-missing", "*", ])
    assert as_json.exit_code == 0 and len(json.loads(as_json.output)["accepted_missing"]["*"]) == 3


def test_a_bad_pattern_or_the_old_bare_flag_is_one_line_and_exit_2(tmp_path):
    base, cand = _runs(tmp_path)
    for args in (["--accept-missing", ""], ["--accept-missing", " "], ["--accept-missing"]):
        out = CliRunner().invoke(main, ["diff", str(base), str(cand), *args])
        assert out.exit_code == 2 and "Traceback" not in out.output, out.output
        assert len(out.output.strip().splitlines()) == 1 and "--accept-missing" in out.output, out.output


def _contention_runs(tmp_path, change) -> tuple:
    """A base whose designs met their tolerable waits, and a candidate whose contention/ ``change`` altered."""
    base, cand = make_run(tmp_path / "base"), make_run(tmp_path / "cand")
    change(cand / "contention")
    return base, cand


def _tier_not_established(folder) -> None:
    path = folder / "inference-vs-training-reserved.json"
    data = json.loads(path.read_text())
    data["tiers"][0]["verdict"] = "not established"  # interactive: met its wait in base
    path.write_text(json.dumps(data))


def _design_gone(folder) -> None:
    (folder / "inference-vs-training-reserved.json").unlink()


def test_a_contention_tier_that_met_its_wait_and_is_now_not_established_is_a_regression_unless_accepted(tmp_path):
    base, cand = (build_summary(r) for r in _contention_runs(tmp_path, _tier_not_established))
    d = compare(base, cand)
    # The gate passed this before: the tier's wait was no longer judged, so nothing newly "missed".
    assert d.regressions == ["contention inference-vs-training / reserved: tier interactive no longer established "
                             "(meets -> not established)"]
    pattern = "contention::inference-vs-training::reserved::*"
    accepted = compare(base, cand, accept_missing=(pattern,))
    assert not accepted.failed and accepted.accepted == {pattern: ["contention::inference-vs-training::reserved::interactive"]}
    assert any(c.startswith(f"accepted (--accept-missing {pattern}): contention") for c in accepted.changes)


def test_a_contention_design_gone_from_the_candidate_is_a_regression_unless_accepted(tmp_path):
    base, cand = _contention_runs(tmp_path, _design_gone)
    d = compare(build_summary(base), build_summary(cand))
    assert d.regressions == ["contention inference-vs-training / reserved: design absent from candidate (in base tiers "
                             "interactive, training met their tolerable wait)"]
    # The real command, as CI runs the gate: exit 1, then 0 once the design is named.
    out = CliRunner().invoke(main, ["diff", str(base), str(cand)])
    assert out.exit_code == 1 and "design absent from candidate" in out.output, out.output
    out = CliRunner().invoke(main, ["diff", str(base), str(cand), "--accept-missing", "contention::*::reserved"])
    assert out.exit_code == 0, out.output
    assert "--accept-missing contention::*::reserved: accepted 1 check\n  - contention::inference-vs-training::reserved\n" in out.output
