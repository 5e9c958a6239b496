"""The pre-upgrade gate: which differences between two runs fail it, and which are only reported."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from dra_harness.cli.app import main
from dra_harness.report.diff import Thresholds, compare, load, normalise
from dra_harness.report import write_report
from dra_harness.report.summary import RunDirError, build_summary
from tests.unit.report_runs import DATA, DEFAULT_TESTS, make_run


def _diff(tmp_path, base_kw=None, cand_kw=None, thresholds: Thresholds | None = None, accept_missing: tuple[str, ...] = ()):
    base = build_summary(make_run(tmp_path / "base", **(base_kw or {})))
    cand = build_summary(make_run(tmp_path / "cand", **(cand_kw or {})))
    return compare(base, cand, thresholds or Thresholds(), accept_missing=accept_missing)


def test_identical_runs_pass_the_gate(tmp_path):
    d = _diff(tmp_path)
    assert not d.failed and d.regressions == [] and d.changes == []


def test_an_upgrade_that_changes_gates_and_apis_but_breaks_nothing_passes_and_lists_the_changes(tmp_path):
    d = _diff(tmp_path,
              base_kw={"k8s": "v1.36.3", "gates": ["DRADeviceTaints", "DRAPrioritizedList"], "taint_versions": ("v1alpha3",)},
              cand_kw={"k8s": "v1.37.2", "gates": ["DRADeviceTaints", "DRADerivedAttributes"], "taint_versions": ("v1beta2",)})
    assert not d.failed
    assert "Kubernetes v1.36.3 -> v1.37.2" in d.changes
    assert "feature gate DRADerivedAttributes: on in candidate only" in d.changes
    assert "feature gate DRAPrioritizedList: on in base only" in d.changes
    assert "DeviceTaintRule served in: v1alpha3 -> v1beta2" in d.changes


def test_a_check_that_newly_fails_is_a_regression(tmp_path):
    failing = [(m, n, "failed" if "no_execute" in n else o, s, r) for m, n, o, s, r in DEFAULT_TESTS]
    d = _diff(tmp_path, cand_kw={"tests": failing})
    assert d.failed and any("new failure" in r and "no_execute_taint" in r for r in d.regressions)


SKIPPED_TAINTS = [(m, n, "skipped" if m == "device_taints" else o, s, r) for m, n, o, s, r in DEFAULT_TESTS]
WITHOUT_TAINTS = [t for t in DEFAULT_TESTS if t[0] != "device_taints"]


def test_a_check_that_passed_and_is_now_skipped_is_a_regression(tmp_path):
    d = _diff(tmp_path, cand_kw={"tests": SKIPPED_TAINTS, "taint_versions": ()})
    assert d.failed
    taint = "suites/test_device_taints.py::test_a_no_execute_taint_evicts_the_pods_using_the_device"
    assert d.regressions == [f"check no longer passes: {taint} (passed -> skipped): Kubernetes v1.31 serves no DeviceTaintRule API"]
    assert "DeviceTaintRule served in: v1beta2 -> none" in d.changes


def test_a_check_that_passed_and_is_now_absent_is_a_regression_and_so_is_the_lower_count(tmp_path):
    d = _diff(tmp_path, cand_kw={"tests": WITHOUT_TAINTS})
    assert d.regressions == [
        "check no longer passes: suites/test_device_taints.py::test_a_no_execute_taint_evicts_the_pods_using_the_device (passed -> absent)",
        f"fewer checks in candidate: {len(DEFAULT_TESTS)} -> {len(WITHOUT_TAINTS)}",
    ]


def test_a_lower_check_count_alone_is_a_regression(tmp_path):
    failed = [(m, n, "failed" if m == "device_taints" else o, s, r) for m, n, o, s, r in DEFAULT_TESTS]
    d = _diff(tmp_path, base_kw={"tests": failed}, cand_kw={"tests": WITHOUT_TAINTS})  # the dropped check never passed
    assert d.regressions == [f"fewer checks in candidate: {len(DEFAULT_TESTS)} -> {len(WITHOUT_TAINTS)}"]


TAINTS = ("suites/test_device_taints.py::*",)


def test_with_accept_missing_checks_that_no_longer_ran_are_changes(tmp_path):
    skipped = _diff(tmp_path / "s", cand_kw={"tests": SKIPPED_TAINTS}, accept_missing=TAINTS)
    absent = _diff(tmp_path / "a", cand_kw={"tests": WITHOUT_TAINTS}, accept_missing=TAINTS)
    assert not skipped.failed and not absent.failed
    assert any(c.startswith(f"accepted (--accept-missing {TAINTS[0]}): check no longer passes") and "passed -> skipped" in c
               for c in skipped.changes)
    assert any(c.startswith("accepted (--accept-missing): fewer checks in candidate") for c in absent.changes)
    # The flag accepts what no longer ran, never a failure.
    failing = [(m, n, "failed" if m == "device_taints" else o, s, r) for m, n, o, s, r in DEFAULT_TESTS]
    assert _diff(tmp_path / "f", cand_kw={"tests": failing}, accept_missing=TAINTS).failed


def test_a_check_that_was_skipped_and_is_now_absent_is_only_a_change(tmp_path):
    d = _diff(tmp_path, base_kw={"tests": SKIPPED_TAINTS}, cand_kw={"tests": WITHOUT_TAINTS + [
        ("device_taints", "test_a_new_check", "passed", 0.1, [])]})
    assert not d.failed
    assert any(c.startswith("check absent from candidate:") for c in d.changes)


def test_contention_waits_regress_only_beyond_both_thresholds(tmp_path):
    # +10 %: under the 25 % default.
    assert not _diff(tmp_path / "a", cand_kw={"contention_scale": 1.1}).failed
    # +50 %: a regression (p95 of several tiers grew by more than 25 % and 60 s) ...
    d = _diff(tmp_path / "b", cand_kw={"contention_scale": 1.5})
    assert d.failed and any("wait_p95" in r for r in d.regressions)
    assert any("tier training now misses" in r for r in d.regressions)
    # ... unless the thresholds allow it; a tier that newly misses its tolerable wait still fails.
    loose = _diff(tmp_path / "c", cand_kw={"contention_scale": 1.5}, thresholds=Thresholds(max_wait_increase=1.0))
    assert not any("wait_p95" in r for r in loose.regressions)
    assert loose.failed and all("now misses" in r for r in loose.regressions)


def test_a_timing_regresses_only_beyond_both_thresholds(tmp_path):
    def with_eviction(seconds):
        return [(m, n, o, s, [{"evicted_after_s": seconds}] if "no_execute" in n else r) for m, n, o, s, r in DEFAULT_TESTS]

    assert not _diff(tmp_path / "a", base_kw={"tests": with_eviction(1.5)}, cand_kw={"tests": with_eviction(2.4)}).failed  # +0.9 s
    d = _diff(tmp_path / "b", base_kw={"tests": with_eviction(1.5)}, cand_kw={"tests": with_eviction(4.0)})
    assert d.failed and any("evicted_after_s" in r for r in d.regressions)
    assert not _diff(tmp_path / "c", base_kw={"tests": with_eviction(1.5)}, cand_kw={"tests": with_eviction(4.0)},
                     thresholds=Thresholds(min_delta_s=5.0)).failed


def test_an_incomplete_candidate_cannot_pass(tmp_path):
    assert _diff(tmp_path, cand_kw={"complete": False}).failed


def test_a_change_in_preemption_is_reported(tmp_path):
    d = _diff(tmp_path, cand_kw={"freed_by_preemption": True})
    assert any("preemption freed a device: False -> True" in c for c in d.changes)


def test_the_diff_command_exits_non_zero_only_on_a_regression(tmp_path):
    base = make_run(tmp_path / "base", k8s="v1.36.3", gates=["DRAPrioritizedList"])
    same = make_run(tmp_path / "same")
    slow = make_run(tmp_path / "slow", contention_scale=1.5)
    ok = CliRunner().invoke(main, ["diff", str(base), str(same)])
    assert ok.exit_code == 0, ok.output
    assert "feature gate DRAPrioritizedList: on in base only" in ok.output and "no regression" in ok.output
    bad = CliRunner().invoke(main, ["diff", str(base), str(slow)])
    assert bad.exit_code == 1 and "REGRESSION" in bad.output
    loose = CliRunner().invoke(main, ["diff", str(base), str(slow), "--max-wait-increase", "1", "--min-wait-delta", "100000"])
    assert "wait_p95" not in "".join(line for line in loose.output.splitlines() if line.startswith("  - "))
    missing = CliRunner().invoke(main, ["diff", str(base), str(tmp_path / "nope")])
    assert missing.exit_code == 2


def test_the_diff_command_fails_on_a_check_that_no_longer_ran_unless_accept_missing(tmp_path):
    base = make_run(tmp_path / "base", contention_scale=None)
    fewer = make_run(tmp_path / "fewer", tests=WITHOUT_TAINTS, contention_scale=None)
    assert CliRunner().invoke(main, ["diff", str(base), str(base)]).exit_code == 0
    gate = CliRunner().invoke(main, ["diff", str(base), str(fewer)])
    assert gate.exit_code == 1 and "check no longer passes" in gate.output and "fewer checks in candidate" in gate.output
    accepted = CliRunner().invoke(main, ["diff", str(base), str(fewer), "--accept-missing", TAINTS[0]])
    assert accepted.exit_code == 0 and "accepted (--accept-missing" in accepted.output


def test_a_run_without_summary_json_is_rebuilt_from_its_files(tmp_path):
    run = make_run(tmp_path / "run")
    assert not (run / "summary.json").exists()
    assert load(run)["verdict"] == "PASS"


def test_a_malformed_summary_json_is_named_and_report_rebuilds_it(tmp_path):
    run = make_run(tmp_path / "run")
    (run / "summary.json").write_text('{"results": "none"}')
    with pytest.raises(RunDirError, match=f"^summary {run / 'summary.json'}: results: must be a list, not a string$"):
        load(run)
    write_report(run)  # rebuilt from the run's own files
    assert load(run)["verdict"] == "PASS"


def test_a_summary_that_breaks_its_own_schema_is_refused_when_written_not_when_compared(tmp_path, monkeypatch):
    """The schema sits with its producer: a summary built wrong (here: measurements without a value) never lands."""
    from dra_harness.report import summary as summary_mod

    run = make_run(tmp_path / "run")
    built = summary_mod.build_summary

    def broken(run_dir):
        out = built(run_dir)
        out["measurements"] = [{"key": "k", "name": "n"}]
        return out

    monkeypatch.setattr(summary_mod, "build_summary", broken)
    with pytest.raises(RunDirError, match=r"as built \(a harness bug: report it\): measurements\.0: 'value' is a required property"):
        write_report(run)
    assert not (run / "summary.json").exists()


# Summaries recorded from real runs on the embedded cluster (4 nodes x 8 devices), every suite:
#   ./harness run --k8s-version 1.36.3 --report-dir ...   and the same with 1.37.2.
RECORDED = DATA / "recorded"


def test_the_recorded_upgrade_from_1_36_3_to_1_37_2_shows_its_real_differences_and_passes():
    d = compare(load(RECORDED / "summary-1.36.3.json"), load(RECORDED / "summary-1.37.2.json"))
    assert not d.failed, d.regressions
    assert "Kubernetes v1.36.3 -> v1.37.2" in d.changes
    assert "feature gate DRADeviceTaintRules: BETA -> GA" in d.changes
    assert "feature gate DRADerivedAttributes: on in candidate only" in d.changes
    assert "DeviceTaintRule served in: v1alpha3, v1beta2 -> v1, v1alpha3, v1beta2" in d.changes
    # 1.36's scheduler said "still not schedulable"; 1.37's does not. Generated names and times do not count.
    behaviour = [c for c in d.changes if c.startswith("behaviour changed")]
    assert behaviour and all("still not schedulable" in c or "no new claims to deallocate" in c for c in behaviour)


def test_the_recorded_upgrade_fails_the_gate_once_the_thresholds_are_tight():
    d = compare(load(RECORDED / "summary-1.36.3.json"), load(RECORDED / "summary-1.37.2.json"),
                Thresholds(max_slowdown=0.2, min_delta_s=0.2))
    assert d.failed and all(r.startswith("timing ") for r in d.regressions)
    assert any("devices_free_after_s" in r for r in d.regressions)


def test_generated_names_and_times_are_not_behaviour():
    assert normalise('claim "gpu-x5pdq" at 2026-11-29T20:15:03Z, class no-such-class-20475') == \
        'claim "gpu-<id>" at <time>, class no-such-class-<id>'
    assert normalise("gpu-node-0 cannot allocate all claims") == "gpu-node-0 cannot allocate all claims"


def test_a_check_established_in_base_and_not_in_candidate_is_a_regression(tmp_path):
    def inventory_from(source):
        return [(m, n, o, s, [{"expected_source": source}] if m == "inventory" else r) for m, n, o, s, r in DEFAULT_TESTS]

    d = _diff(tmp_path, base_kw={"tests": inventory_from("file")}, cand_kw={"tests": inventory_from("observed")})
    assert d.failed and any("passed -> not established" in r for r in d.regressions)
    assert not _diff(tmp_path / "same", base_kw={"tests": inventory_from("file")}, cand_kw={"tests": inventory_from("file")}).failed


def _sched(points: dict[str, tuple[float, int]]) -> str:
    """kube-scheduler's DynamicResources execution-duration histogram: point -> (sum seconds, count)."""
    lines = ["# TYPE scheduler_plugin_execution_duration_seconds histogram"]
    for point, (total, count) in points.items():
        labels = f'extension_point="{point}",plugin="DynamicResources",status="Success"'
        lines += [f'scheduler_plugin_execution_duration_seconds_bucket{{{labels},le="+Inf"}} {count}',
                  f"scheduler_plugin_execution_duration_seconds_sum{{{labels}}} {total}",
                  f"scheduler_plugin_execution_duration_seconds_count{{{labels}}} {count}"]
    return "\n".join(lines) + "\n"


def test_the_scheduler_dra_timings_of_the_whole_run_are_the_mean_between_its_start_and_end():
    from dra_harness.report.fingerprint import scheduler_dra_timer

    texts = iter([_sched({"Filter": (0.5, 100)}), _sched({"Filter": (0.9, 150), "PreBind": (2.2, 40)})])
    finish = scheduler_dra_timer({"kube-scheduler": lambda: next(texts)})
    assert finish is not None and finish() == {"over": "the whole run", "mean_s": {"Filter": 0.008, "PreBind": 0.055}}
    # A scheduler whose metrics cannot be read gives no timer rather than a guess.
    assert scheduler_dra_timer({"kube-scheduler": lambda: (_ for _ in ()).throw(OSError("403"))}) is None


def test_a_scheduler_dra_timing_that_moved_beyond_the_slowdown_is_listed_not_gated(tmp_path):
    base = build_summary(make_run(tmp_path / "base"))
    cand = build_summary(make_run(tmp_path / "cand"))
    base["fingerprint"]["scheduler_dra"] = {"over": "the whole run", "mean_s": {"Filter": 0.0064, "PreBind": 0.055}}
    cand["fingerprint"]["scheduler_dra"] = {"over": "the whole run", "mean_s": {"Filter": 0.0131, "PreBind": 0.058}}
    d = compare(base, cand, Thresholds())
    assert d.changes == ["scheduler DRA plugin Filter, mean per call over the run: 6.4 ms -> 13.1 ms (+105%)"]
    assert not d.failed
