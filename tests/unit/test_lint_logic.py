"""lint's pure parts: the compareTo fix for an ordered comparison, and what it says of a request on plain data."""

from __future__ import annotations

import pytest

from dra_harness.checks.diagnose import ClusterView
from dra_harness.checks.lint import Document, Report, fix_for, match_requests, resource_for
from dra_harness.providers.hardware import Hardware, hardware_slices

NO_OVERLOAD = "found no matching overload for '_>=_' applied to '(kubernetes.Quantity, kubernetes.Quantity)'"
DRIVER = "gpu.example.com"


@pytest.mark.parametrize(("expression", "fixed"), [
    ('device.capacity["gpu.example.com"].memory >= quantity("64Gi")',
     'device.capacity["gpu.example.com"].memory.compareTo(quantity("64Gi")) >= 0'),
    ("device.driver == 'x' && device.attributes['d'].v > semver('1.0.0')",
     "device.driver == 'x' && device.attributes['d'].v.compareTo(semver('1.0.0')) > 0"),
    ("quantity('1') < device.capacity['d'].memory", "quantity('1').compareTo(device.capacity['d'].memory) < 0"),
])
def test_an_ordered_comparison_of_quantities_or_versions_is_rewritten_with_compareto(expression, fixed):
    assert fix_for(expression, NO_OVERLOAD) == fixed


def test_no_fix_is_offered_for_another_refusal_or_a_comparison_of_plain_values():
    assert fix_for("device.attributes['d'].index >= 2", NO_OVERLOAD) == ""
    assert fix_for('device.capacity["d"].memory >= quantity("1")', "spec.selectors: Too many") == ""


def test_the_resource_is_the_documents_own_api_version_so_an_unserved_one_is_caught():
    res = resource_for({"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaimTemplate"})
    assert res is not None and res.path("ns") == "/apis/resource.k8s.io/v1beta1/namespaces/ns/resourceclaimtemplates"
    assert resource_for({"apiVersion": "v1", "kind": "ConfigMap"}) is None


def _view(per_node: int = 2) -> ClusterView:
    devices = [{"name": f"gpu-{i}", "capacity": {"memory": {"value": "80Gi"}}} for i in range(per_node)]
    slices = [{"metadata": {"name": f"s{n}"}, "spec": {"driver": DRIVER, "nodeName": f"n{n}", "pool": {"name": f"n{n}"},
                                                      "devices": devices}} for n in range(2)]
    cls = {"metadata": {"name": DRIVER}, "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}}
    return ClusterView(slices=slices, classes={DRIVER: cls}, claims=[], nodes={})


def _template(count: int = 1, expression: str = "true", cls: str = DRIVER) -> Document:
    return Document("f.yaml", 1, {"kind": "ResourceClaimTemplate", "metadata": {"name": "t"}, "spec": {"spec": {"devices": {
        "requests": [{"name": "gpu", "exactly": {"deviceClassName": cls, "count": count,
                                                 "selectors": [{"cel": {"expression": expression}}]}}]}}}})


def test_a_request_lists_its_matching_devices_and_warns_where_it_can_never_be_allocated():
    view = _view()
    report = Report()
    match_requests(_template(), view, view.classes, report)
    assert [f.level for f in report.findings] == ["info"]
    assert "matches 4 devices on 2 nodes: n0/gpu-0, n0/gpu-1, n1/gpu-0, n1/gpu-1" in report.findings[0].message
    report = Report()
    match_requests(_template(count=3), view, view.classes, report)
    assert "asks for 3 devices on one node; at most 2 match on any node" in report.findings[0].message
    report = Report()
    match_requests(_template(cls="nope"), view, view.classes, report)
    assert "DeviceClass 'nope' exists neither on the target nor in the files" in report.findings[0].message
    report = Report()
    match_requests(_template(expression="device.capacity['gpu.example.com'].memroy.compareTo(quantity('1')) > 0"),
                   view, view.classes, report)
    assert "matches no device" in report.findings[0].message and "did you mean gpu.example.com/memory?" in report.findings[0].message


def test_expected_hardware_becomes_slices_with_typed_attributes():
    hw = Hardware("gpu.example.com", {"n1": 2, "n0": 1}, attributes={"model": "X", "driverVersion": "1.0.0", "index": 3, "mig": True},
                  capacity={"memory": "80Gi"})
    slices = hardware_slices(hw)
    assert [s["spec"]["nodeName"] for s in slices] == ["n0", "n1"] and len(slices[1]["spec"]["devices"]) == 2
    attrs = slices[0]["spec"]["devices"][0]["attributes"]
    assert attrs == {"model": {"string": "X"}, "driverVersion": {"version": "1.0.0"}, "index": {"int": 3}, "mig": {"bool": True}}
    assert slices[0]["spec"]["devices"][0]["capacity"] == {"memory": {"value": "80Gi"}}
