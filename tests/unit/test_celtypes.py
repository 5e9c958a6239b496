"""The offline type check refuses what Kubernetes' CEL checker refuses, in its words, and nothing it accepts."""

from __future__ import annotations

import pytest

from dra_harness.checks import cel

MEMORY = "device.capacity['gpu.example.com'].memory"
DEVICE = {"attributes": {"model": {"string": "LATEST-GPU-MODEL"}, "driverVersion": {"version": "1.0.0"}},
          "capacity": {"memory": {"value": "80Gi"}}}


def test_the_guides_quantity_comparison_is_refused_with_the_api_servers_message_and_matches_nothing():
    expression = f"{MEMORY} >= quantity('64Gi')"
    assert cel.rejection(expression) == \
        "found no matching overload for '_>=_' applied to '(kubernetes.Quantity, kubernetes.Quantity)'"
    outcome = cel.evaluate(expression, "gpu.example.com", DEVICE)
    assert outcome.rejected and not outcome.matched


@pytest.mark.parametrize("expression", [
    f"{MEMORY}.compareTo(quantity('64Gi')) >= 0",
    f"{MEMORY}.isGreaterThan(quantity('64Gi'))",
    f"{MEMORY} == quantity('80Gi')",
    "device.attributes['gpu.example.com'].driverVersion.compareTo(semver('1.0.0')) >= 0",
    "device.attributes['gpu.example.com'].model == 'LATEST-GPU-MODEL' && !device.allowMultipleAllocations",
])
def test_method_comparisons_and_equality_compile_and_match(expression):
    assert cel.rejection(expression) == ""
    assert cel.evaluate(expression, "gpu.example.com", DEVICE).matched


@pytest.mark.parametrize(("expression", "message"), [
    ("semver('1.2.3') > semver('1.0.0')", "'_>_' applied to '(kubernetes.Semver, kubernetes.Semver)'"),
    (f"{MEMORY} + quantity('1Gi') == quantity('81Gi')", "'_+_' applied to '(kubernetes.Quantity, kubernetes.Quantity)'"),
    ("device.driver", "must evaluate to bool or the unknown type, not string"),
    (f"device.driver == 'x' || {MEMORY} < quantity('1Gi')", "'_<_' applied to '(kubernetes.Quantity, kubernetes.Quantity)'"),
])
def test_what_has_no_overload_is_refused_wherever_it_stands(expression, message):
    assert message in cel.rejection(expression)
