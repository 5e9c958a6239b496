"""The gate radar: every DRA gate of every release in data/gates.json maps to a check that exists, or is listed as
not covered with its reason. Its negative controls plant an unmapped gate and a check that does not exist."""

from __future__ import annotations

import copy

from dra_harness.components import gate_radar, gates


def test_every_dra_gate_of_every_release_is_mapped_to_a_check_or_listed_as_not_covered():
    assert gate_radar.unmapped() == [], "map each gate in data/gate-coverage.yaml (a check, or not_covered: why)"


def test_every_mapped_check_exists_in_its_suite():
    assert gate_radar.missing_checks() == []


def test_every_not_covered_gate_says_why():
    assert all(len(why) > 20 for why in gate_radar.load().not_covered.values())


def test_negative_control_a_planted_unmapped_gate_is_reported_with_its_release():
    table = copy.deepcopy(gates.table())
    table["1.38.0-beta.0"]["feature_gates"]["DRAPlantedByTheTest"] = True
    assert gate_radar.unmapped(table) == ["DRAPlantedByTheTest (1.38.0-beta.0)"]


def test_negative_control_a_check_renamed_away_is_reported():
    coverage = gate_radar.load()
    coverage.checks["DRAAdminAccess"] = ["suites/test_governance.py::test_that_does_not_exist"]
    assert gate_radar.missing_checks(coverage) == ["DRAAdminAccess: suites/test_governance.py::test_that_does_not_exist"]
