"""Negative controls: the inventory suite must fail when a slice is missing, a device is duplicated,
or the DeviceClass selects other devices than the driver's.

Each control first proves the suite passes on the healthy cluster, then injects the
fault, runs the suite as a user would (a separate pytest against the cluster's
kubeconfig) and checks the failure names the fault.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import yaml

from dra_harness.kube import rest
from dra_harness.providers.embedded.cluster import DRIVER_NAME


def run_inventory(cluster, tmp_path, test: str = "") -> subprocess.CompletedProcess:
    hw = tmp_path / "hardware.yaml"
    spec = cluster.state().spec
    hw.write_text(yaml.safe_dump({"driver": DRIVER_NAME, "nodes": {n: {"devices": spec.gpus_per_node} for n in spec.node_names()}}))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "suites/test_inventory.py" + (f"::{test}" if test else ""), "--cluster=existing",
         f"--kubeconfig={cluster.kubeconfig}", f"--expected-hardware={hw}", "-q", "-p", "no:cacheprovider"],
        capture_output=True, text=True, timeout=300,
    )


def node_slices(kube, node: str) -> list[dict]:
    return kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={DRIVER_NAME},spec.nodeName={node}")


@pytest.fixture
def healthy(small_cluster, tmp_path):
    ok = run_inventory(small_cluster, tmp_path)
    assert ok.returncode == 0, f"positive control failed:\n{ok.stdout[-3000:]}"
    return small_cluster


def test_a_missing_slice_fails_the_inventory_suite(healthy, tmp_path):
    kube = healthy.kube()
    # Stop the node's driver first, or it would republish the slice.
    healthy.stop_driver("gpu-node-1")
    for s in node_slices(kube, "gpu-node-1"):
        kube.delete(rest.RESOURCE_SLICES, s["metadata"]["name"])

    out = run_inventory(healthy, tmp_path)
    assert out.returncode == 1, out.stdout[-3000:]
    assert "node gpu-node-1 publishes no ResourceSlice for gpu.example.com" in out.stdout
    assert "test_every_gpu_node_publishes_resource_slices FAILED" in out.stdout or "FAILED suites/test_inventory.py::test_every_gpu_node_publishes_resource_slices" in out.stdout


def test_a_duplicated_device_fails_the_inventory_suite(healthy, tmp_path):
    kube = healthy.kube()
    healthy.stop_driver("gpu-node-1")
    original = node_slices(kube, "gpu-node-1")[0]
    donor = node_slices(kube, "gpu-node-0")[0]
    # Same pool and generation as gpu-node-1's slice, carrying gpu-node-0's first device (name and uuid).
    kube.create(rest.RESOURCE_SLICES, {
        "metadata": {"name": "injected-duplicate"},
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": "gpu-node-1",
            "pool": original["spec"]["pool"],
            "devices": donor["spec"]["devices"][:1],
        },
    })

    out = run_inventory(healthy, tmp_path)
    assert out.returncode == 1, out.stdout[-3000:]
    assert "is published twice" in out.stdout
    assert "report the same uuid" in out.stdout
    assert "FAILED suites/test_inventory.py::test_no_device_or_pool_is_published_twice" in out.stdout


def test_a_restarted_driver_republishes_and_the_suite_passes_again(healthy, tmp_path):
    kube = healthy.kube()
    healthy.stop_driver("gpu-node-1")
    for s in node_slices(kube, "gpu-node-1"):
        kube.delete(rest.RESOURCE_SLICES, s["metadata"]["name"])
    assert run_inventory(healthy, tmp_path).returncode == 1
    healthy.start_driver("gpu-node-1")
    deadline = time.monotonic() + 60
    while not node_slices(kube, "gpu-node-1") and time.monotonic() < deadline:
        time.sleep(0.5)
    out = run_inventory(healthy, tmp_path)
    assert out.returncode == 0, out.stdout[-3000:]


CLASS_CHECK = "test_the_device_class_selects_exactly_the_drivers_devices"


def _select(kube, expression: str) -> None:
    kube.patch(rest.DEVICE_CLASSES, DRIVER_NAME, {"spec": {"selectors": [{"cel": {"expression": expression}}]}})
    # Each fault names the driver in its CEL text: the old check (driver name in the text) passed all three.
    assert DRIVER_NAME in expression


def test_a_device_class_that_selects_nothing_some_or_too_much_fails_the_class_check(healthy, tmp_path):
    kube = healthy.kube()
    total = sum(len(s["spec"]["devices"]) for s in kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={DRIVER_NAME}"))

    _select(kube, f"device.attributes['{DRIVER_NAME}'].modle == 'LATEST-GPU-MODEL'")  # a typo: matches nothing
    out = run_inventory(healthy, tmp_path, CLASS_CHECK)
    assert out.returncode == 1, out.stdout[-3000:]
    assert f"DeviceClass {DRIVER_NAME} selects 0 devices; {DRIVER_NAME} publishes {total}" in out.stdout, out.stdout[-3000:]
    assert f"not selected ({total}): " in out.stdout and f"read but published by no device: {DRIVER_NAME}/modle" in out.stdout

    first = node_slices(kube, "gpu-node-0")[0]
    one = first["spec"]["devices"][0]
    uuid = one["attributes"]["uuid"]["string"]
    _select(kube, f"device.driver == '{DRIVER_NAME}' && device.attributes['{DRIVER_NAME}'].uuid == '{uuid}'")  # a subset
    out = run_inventory(healthy, tmp_path, CLASS_CHECK)
    assert out.returncode == 1, out.stdout[-3000:]
    assert f"DeviceClass {DRIVER_NAME} selects 1 devices; {DRIVER_NAME} publishes {total}" in out.stdout, out.stdout[-3000:]
    assert f"not selected ({total - 1}): " in out.stdout and f"{first['spec']['pool']['name']}/{one['name']}," not in out.stdout

    kube.create(rest.RESOURCE_SLICES, {"metadata": {"name": "other-vendor"}, "spec": {
        "driver": "other.example.com", "allNodes": True, "pool": {"name": "other", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "accel-0"}]}})
    _select(kube, f"device.driver == '{DRIVER_NAME}' || device.driver == 'other.example.com'")  # too much
    out = run_inventory(healthy, tmp_path, CLASS_CHECK)
    assert out.returncode == 1, out.stdout[-3000:]
    assert f"DeviceClass {DRIVER_NAME} selects {total + 1} devices; {DRIVER_NAME} publishes {total}" in out.stdout, out.stdout[-3000:]
    assert f"selected but not {DRIVER_NAME}'s (1): other.example.com/other/accel-0" in out.stdout
    assert "\n- not selected (" not in out.stdout

    _select(kube, f"device.driver == '{DRIVER_NAME}'")  # restored: the same check passes
    out = run_inventory(healthy, tmp_path, CLASS_CHECK)
    assert out.returncode == 0, out.stdout[-3000:]
