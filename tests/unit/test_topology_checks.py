"""The topology check reads the simulated node's layout: roots of 4 GPUs, NVLink domains crossing them."""

from __future__ import annotations

from dra_harness.topology.checks import problems
from dra_harness.topology.fleet import NVLINK_DOMAIN, PCIE_ROOT


def test_devices_under_one_root_and_one_domain_raise_nothing():
    assert problems(["gpu-0", "gpu-1"], (PCIE_ROOT, NVLINK_DOMAIN)) == []
    assert problems(["gpu-4", "gpu-5", "gpu-6", "gpu-7"], (PCIE_ROOT,)) == []


def test_devices_spanning_roots_are_named_per_root():
    assert problems(["gpu-3", "gpu-4"], (PCIE_ROOT,)) == [
        "2 devices of one claim span 2 PCIe roots: pci0000:00: gpu-3; pci0000:80: gpu-4"]


def test_one_root_can_still_span_two_nvlink_domains():
    assert problems(["gpu-0", "gpu-2"], (PCIE_ROOT, NVLINK_DOMAIN)) == [
        "2 devices of one claim span 2 NVLink domains: nvl-a: gpu-0; nvl-b: gpu-2"]


def test_gpus_four_apart_share_a_domain_but_not_a_root():
    assert problems(["gpu-0", "gpu-4"], (NVLINK_DOMAIN,)) == []
    assert len(problems(["gpu-0", "gpu-4"], (PCIE_ROOT, NVLINK_DOMAIN))) == 1
