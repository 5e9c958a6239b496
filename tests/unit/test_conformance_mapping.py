"""The conformance mapping: every suite check is in it, what it names exists, and verdicts follow the rules.

The mapping (``data/conformance.yaml``) is only worth reading if it is complete: a check the
suites gain must be mapped (if only to nothing, with why) before this passes. The negative
controls plant an unmapped check and a malformed file and show each is named.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dra_harness import conformance
from dra_harness.conformance import CheckMapping, Gap, Mapping, Requirement
from dra_harness.errors import InputError


@pytest.fixture(scope="module")
def mapping() -> Mapping:
    return conformance.load()


@pytest.fixture(scope="module")
def checks() -> set[str]:
    return conformance.suite_checks()


def test_the_suites_are_found_and_hold_checks(checks):
    assert len(checks) > 50, sorted(checks)
    assert "test_gpu_visibility::test_a_pod_without_a_claim_sees_no_gpu" in checks


def test_every_suite_check_has_a_mapping_entry(mapping, checks):
    assert conformance.unmapped(mapping, checks) == []


def test_a_new_unmapped_suite_check_is_named(mapping, checks, tmp_path):
    suites = tmp_path / "suites"
    shutil.copytree(conformance.SUITES, suites, ignore=shutil.ignore_patterns("__pycache__"))
    (suites / "test_planted.py").write_text(
        "def test_new_unmapped_check():\n    pass\n\n\n"
        "class TestPlanted:\n    def test_in_a_class(self):\n        pass\n\n    def helper(self):\n        pass\n\n\n"
        "def helper_not_a_check():\n    pass\n")
    found = conformance.suite_checks(suites)
    assert found - checks == {"test_planted::test_new_unmapped_check", "test_planted::TestPlanted::test_in_a_class"}
    assert conformance.unmapped(mapping, found) == ["test_planted::TestPlanted::test_in_a_class",
                                                    "test_planted::test_new_unmapped_check"]


def test_no_entry_names_a_check_that_does_not_exist(mapping, checks):
    assert conformance.unknown(mapping, checks) == []
    gone = next(iter(sorted(checks)))
    assert conformance.unknown(mapping, checks - {gone}) == [gone]  # control: a removed check is named


def test_every_requirement_id_used_by_a_check_or_a_gap_is_defined(mapping):
    defined = {r.id for r in mapping.requirements}
    used = {r for m in mapping.checks.values() for r in m.requirements} | {g.requirement for g in mapping.gaps}
    assert used <= defined, sorted(used - defined)


def test_every_requirement_has_an_https_source_a_level_and_a_version(mapping):
    for r in mapping.requirements:
        assert r.source.startswith("https://github.com/") and "/blob/" in r.source, r
        assert all(u.startswith("https://") for u in r.also), r
        assert r.level in ("MUST", "SHOULD") and r.framework in conformance.FRAMEWORKS, r
        assert r.since.startswith("1.") and r.title and r.summary, r


def test_both_frameworks_and_the_named_requirements_are_covered(mapping):
    ids = {r.id for r in mapping.requirements}
    for wanted in ("dra_support/exposure", "dra_support/allocation", "secure_accelerator_access/positive",
                   "secure_accelerator_access/negative-isolation", "secure_accelerator_access/multi-container-isolation",
                   "gang_scheduling/positive", "gpu_sharing/shared-gpu", "driver_runtime_management/advertised-via-dra",
                   *(f"kep-5970/{b}" for b in ("driver-registration", "resourceslice-publishing", "device-allocation",
                                              "node-prepare-resources", "pod-runs-successfully",
                                              "node-unprepare-resources", "resource-reuse"))):
        assert wanted in ids, wanted
    levels = {r.id.split("/")[0]: r.level for r in mapping.requirements}
    assert levels["secure_accelerator_access"] == levels["gang_scheduling"] == levels["dra_support"] == "MUST"
    assert levels["gpu_sharing"] == levels["driver_runtime_management"] == "SHOULD"


def test_each_requirement_is_either_mapped_or_a_named_gap_never_both(mapping):
    for r in mapping.requirements:
        gapped = [g for g in mapping.gaps if g.requirement == r.id]
        assert bool(mapping.checks_for(r.id)) != bool(gapped), (r.id, mapping.checks_for(r.id), gapped)


def test_every_entry_says_why_even_one_that_proves_nothing(mapping):
    assert all(m.why.strip() for m in mapping.checks.values())
    assert any(not m.requirements for m in mapping.checks.values())


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "conformance.yaml"
    p.write_text(text)
    return p


REQ = """requirements:
  - {id: a/one, framework: kep-5970, title: A, level: MUST, since: "1.36", summary: s, source: "https://github.com/x/y/blob/main/z"}
"""


@pytest.mark.parametrize(("text", "says"), [
    (REQ + "checks:\n  test_x::test_y: {requirements: [a/two], why: w}\ngaps: []\n",
     "checks.test_x::test_y: requirement 'a/two' is not defined"),
    (REQ + "checks: {}\ngaps: [{requirement: b, missing: m, reachable: kind}]\n", "gaps.0: requirement 'b' is not defined"),
    (REQ + "checks: {}\ngaps: [{requirement: a/one, missing: m, reachable: somewhere}]\n", "gaps.0.reachable"),
    (REQ.replace('"1.36"', "1.36") + "checks: {}\ngaps: []\n", "requirements.0.since"),
    (REQ.replace("https://", "http://") + "checks: {}\ngaps: []\n", "requirements.0.source"),
    (REQ.replace("MUST", "MAY") + "checks: {}\ngaps: []\n", "requirements.0.level"),
    (REQ + REQ.split("\n", 1)[1] + "checks: {}\ngaps: []\n", "a/one defined more than once"),
    (REQ + "checks:\n  not-a-check: {requirements: [], why: w}\ngaps: []\n", "checks"),
    ("requirements: [\n", "is not valid YAML"),
])
def test_a_malformed_mapping_fails_in_one_line_naming_the_problem(tmp_path, text, says):
    with pytest.raises(InputError) as e:
        conformance.load(_write(tmp_path, text))
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_node_id_becomes_its_check_id_and_cases_merge_worst_first():
    assert conformance.check_id("src/dra_harness/suites/test_a.py::test_b[x-1]") == "test_a::test_b"
    assert conformance.check_id("suites/test_a.py::TestC::test_d") == "test_a::TestC::test_d"
    merged = conformance.check_outcomes([("s/test_a.py::test_b[1]", "passed"), ("s/test_a.py::test_b[2]", "failed"),
                                         ("s/test_a.py::test_b[3]", "skipped"), ("s/test_a.py::test_c[1]", "skipped"),
                                         ("s/test_a.py::test_c[2]", "passed")])
    assert merged == {"test_a::test_b": "failed", "test_a::test_c": "passed"}
    with pytest.raises(ValueError):
        conformance.check_outcomes([("s/test_a.py::test_b", "xpassed")])


def _requirement(rid: str) -> Requirement:
    return Requirement(rid, "ai-conformance", rid, "MUST", "1.35", "s", "https://github.com/x/y/blob/main/z")


PLAIN = Mapping(
    requirements=(_requirement("r/met"), _requirement("r/failed"), _requirement("r/skipped"), _requirement("r/gap")),
    checks={"t::pass": CheckMapping("t::pass", ("r/met", "r/failed"), "w"),
            "t::fail": CheckMapping("t::fail", ("r/failed",), "w"),
            "t::skip": CheckMapping("t::skip", ("r/met", "r/skipped"), "w"),
            "t::unrun": CheckMapping("t::unrun", ("r/skipped",), "w"),
            "t::nothing": CheckMapping("t::nothing", (), "w")},
    gaps=(Gap("r/gap", "a probe of the second container", "embedded"),))


def test_verdicts_on_plain_data_met_not_met_and_not_established_with_reasons():
    outcomes = {"t::pass": "passed", "t::fail": "failed", "t::skip": "skipped", "t::nothing": "passed"}
    got = {v.requirement.id: v for v in conformance.verdicts(PLAIN, outcomes, {"t::skip": "no GPU\n on this node"})}
    assert [v.requirement.id for v in conformance.verdicts(PLAIN, outcomes, {})] == ["r/met", "r/failed", "r/skipped", "r/gap"]
    assert (got["r/met"].state, got["r/met"].reason) == ("met", "passed: t::pass")
    assert got["r/failed"].state == "not met" and got["r/failed"].reason == "failed: t::fail"  # a fail beats a pass
    assert got["r/skipped"].state == "not established"
    assert got["r/skipped"].reason == "no mapped check passed: t::skip: skipped (no GPU on this node); t::unrun: not run"
    assert got["r/gap"].state == "not established" and got["r/gap"].checks == ()
    assert got["r/gap"].reason == "no check covers it yet (gap, embedded: a probe of the second container)"


def test_an_errored_check_neither_fails_nor_establishes_a_requirement():
    got = {v.requirement.id: v for v in conformance.verdicts(PLAIN, {"t::fail": "error", "t::pass": "passed"}, {"t::fail": "boom"})}
    assert got["r/failed"].state == "met" and "errored: t::fail" in got["r/failed"].reason
    alone = {v.requirement.id: v for v in conformance.verdicts(PLAIN, {"t::fail": "error"}, {"t::fail": "boom"})}
    assert alone["r/failed"].state == "not established" and "t::fail: error (boom)" in alone["r/failed"].reason
    with pytest.raises(ValueError):
        conformance.verdicts(PLAIN, {"t::fail": "xfailed"}, {})


def test_the_shipped_mapping_gives_a_verdict_for_every_requirement(mapping, checks):
    outcomes = dict.fromkeys(checks, "passed")
    got = conformance.verdicts(mapping, outcomes, {})
    assert len(got) == len(mapping.requirements)
    assert {v.requirement.id for v in got if v.state == "not established"} == {g.requirement for g in mapping.gaps}
    assert all(v.state == "met" for v in got if v.checks)
