"""The inventory audit on plain slice data: each finding kind is produced, and only when due."""

from __future__ import annotations

import copy

import pytest

from dra_harness.checks.inventory import audit
from dra_harness.providers.hardware import Hardware, HardwareFileError, load_hardware

DRIVER = "gpu.example.com"


def device(i: int, node: str, model: str = "LATEST-GPU-MODEL", uuid: str | None = None) -> dict:
    return {
        "name": f"gpu-{i}",
        "attributes": {
            "index": {"int": i},
            "model": {"string": model},
            "uuid": {"string": uuid or f"gpu-{node}-{i}"},
            "driverVersion": {"version": "1.0.0"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


def slice_for(node: str, n: int, name: str | None = None, generation: int = 1, count: int = 1, pool: str | None = None) -> dict:
    return {
        "metadata": {"name": name or f"{node}-slice"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
            "devices": [device(i, node) for i in range(n)],
        },
    }


HW = Hardware(DRIVER, {"n0": 2, "n1": 2}, DRIVER, {"model": "LATEST-GPU-MODEL"}, {"memory": "80Gi"})


def kinds(findings) -> list[str]:
    return sorted(f.kind for f in findings)


def test_matching_slices_have_no_findings():
    assert audit([slice_for("n0", 2), slice_for("n1", 2)], HW, {"n0", "n1"}) == []


def test_a_node_without_slices_is_reported():
    findings = audit([slice_for("n0", 2)], HW, {"n0", "n1"})
    assert kinds(findings) == ["missing-slice"]
    assert "n1" in findings[0].message


def test_a_wrong_device_count_is_reported():
    assert kinds(audit([slice_for("n0", 2), slice_for("n1", 3)], HW)) == ["device-count"]


def test_a_duplicated_device_and_uuid_are_reported():
    dup = slice_for("n0", 1, name="intruder")
    findings = audit([slice_for("n0", 2), slice_for("n1", 2), dup], HW)
    assert "duplicate-device" in kinds(findings)
    assert "duplicate-uuid" in kinds(findings)


def test_a_pool_published_for_two_nodes_is_reported():
    other = slice_for("n1", 2, pool="n0")
    findings = audit([slice_for("n0", 2), other], Hardware(DRIVER, {"n0": 2, "n1": 2}))
    assert "duplicate-pool" in kinds(findings)


def test_an_incomplete_pool_is_reported():
    findings = audit([slice_for("n0", 2, count=2), slice_for("n1", 2)], HW)
    assert kinds(findings) == ["incomplete-pool"]


def test_only_the_newest_generation_counts():
    old = slice_for("n0", 5, name="old", generation=1)
    new = slice_for("n0", 2, name="new", generation=2)
    assert audit([old, new, slice_for("n1", 2)], HW) == []


def test_a_slice_for_a_node_that_does_not_exist_is_stale():
    findings = audit([slice_for("n0", 2), slice_for("n1", 2), slice_for("gone", 0)], HW, {"n0", "n1"})
    assert "stale-slice" in kinds(findings)


def test_attribute_and_capacity_mismatches_are_reported():
    s = slice_for("n0", 2)
    s["spec"]["devices"][1]["attributes"]["model"] = {"string": "OLD-MODEL"}
    s["spec"]["devices"][0]["capacity"]["memory"]["value"] = "40Gi"
    assert kinds(audit([s, slice_for("n1", 2)], HW)) == ["attribute", "capacity"]


def test_other_drivers_are_ignored():
    other = copy.deepcopy(slice_for("n0", 4))
    other["spec"]["driver"] = "other.example.com"
    assert audit([slice_for("n0", 2), slice_for("n1", 2), other], HW) == []


@pytest.mark.parametrize(
    "content, message",
    [
        ("driver: x\n", "(top level): 'nodes' is a required property"),
        ("driver: x\nnodes: {a: {devices: -1}}\n", "nodes.a.devices: must be at least 0"),
        ("driver: x\nnodes: {a: {devices: 1, gpus: 2}}\n", "nodes.a: Additional properties are not allowed"),
        ("driver: [x\n", "not valid YAML"),
    ],
)
def test_bad_hardware_files_give_one_line_errors(tmp_path, content, message):
    path = tmp_path / "hw.yaml"
    path.write_text(content)
    with pytest.raises(HardwareFileError) as e:
        load_hardware(path)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_a_missing_hardware_file_is_one_line(tmp_path):
    with pytest.raises(HardwareFileError, match="No such file"):
        load_hardware(tmp_path / "nope.yaml")


def test_the_shipped_example_hardware_file_loads():
    from pathlib import Path

    hw = load_hardware(Path(__file__).parents[2] / "fixtures" / "hardware" / "embedded-default.yaml")
    assert hw.total_devices == 32
