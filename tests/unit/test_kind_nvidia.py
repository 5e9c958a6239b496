"""NVIDIA's chart on kind: the values we pass, checked against what the chart reads (pure: no cluster)."""

from __future__ import annotations

from dra_harness.providers.kind import nvidia
from dra_harness.providers.kind.session import KindProvider
from dra_harness.options import RunConfig


def test_the_chart_gets_our_image_never_pulled_the_emulated_root_and_gpus_only():
    values = dict(v.split("=", 1) for v in nvidia.helm_values("0.5.0"))
    assert values["image.repository"] == nvidia.IMAGE and values["image.tag"] == "v0.5.0"
    assert values["image.pullPolicy"] == "Never"  # imported into each node: a pull would mean it is missing
    assert values["nvidiaDriverRoot"] == nvidia.DRIVER_ROOT and not nvidia.DRIVER_ROOT.startswith("/run/")  # noexec there
    assert values["resources.computeDomains.enabled"] == "false" and values["gpuResourcesEnabledOverride"] == "true"
    assert values["featureGates.TimeSlicingSettings"] == "true"
    # The plugin's NVML looks for the GPUs' device nodes in the driver root, as mounted in its container.
    assert values["kubeletPlugin.containers.gpus.env[0].name"] == "DRA_HARNESS_NVML_DEV_ROOT"
    assert values["kubeletPlugin.containers.gpus.env[0].value"] == "/driver-root/dev"


def test_a_kind_run_picks_nvidia_s_chart_and_probe_image_only_for_the_nvidia_profile():
    for given, expected in (("nvidia", "nvidia"), ("gpu.nvidia.com", "nvidia"), ("example", "example"), (None, "example")):
        p = KindProvider(RunConfig(driver=given or None), "run1")
        assert p.driver == expected and p.spec().driver == expected
        assert (p.nvml_probe_image is not None) == (expected == "nvidia")


def test_each_node_of_each_cluster_gets_gpus_of_its_own_under_a_seed_the_emulation_accepts():
    import re

    seeds = {nvidia.seed(c, n) for c in ("dra-run-20261205-131240-8d04", "kind") for n in ("w1", "w2")}
    assert len(seeds) == 4 and all(re.fullmatch(r"[A-Za-z0-9._-]{1,63}", s) for s in seeds)
