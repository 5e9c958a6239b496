"""The embedded cluster with NVIDIA's driver: what --driver chooses, what provenance and the expected hardware say,
and the plugin's command line (pure logic; the cluster itself is tests/integration/test_nvidia_real_node.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_harness.errors import InputError
from dra_harness.components import emulated_gpus
from dra_harness.providers.embedded import commands
from dra_harness.providers.embedded.provider import _driver, driver_description, local_hardware
from dra_harness.providers.localstate import ClusterSpec, ClusterState


@pytest.mark.parametrize(("option", "driver"), [(None, "example"), ("example", "example"), ("gpu.example.com", "example"),
                                                ("nvidia", "nvidia"), ("gpu.nvidia.com", "nvidia")])
def test_driver_names_a_profile_or_its_driver(option, driver):
    assert _driver(option) == driver


def test_a_driver_the_embedded_cluster_cannot_run_is_one_line():
    with pytest.raises(InputError, match="no driver profile 'amd'"):
        _driver("amd")


def test_provenance_names_nvidias_driver_on_emulated_gpus_never_just_a_gpu():
    assert driver_description(ClusterSpec(driver="nvidia")) == \
        "NVIDIA DRA driver v0.5.0 on emulated GPUs (H100 profile, emulated NVML)"
    assert driver_description(ClusterSpec()).startswith("dra-example-kubeletplugin v")


def test_the_expected_hardware_of_an_nvidia_cluster_is_its_emulated_h100s():
    hw = local_hardware(ClusterSpec(driver="nvidia", nodes=2, real_nodes=1, gpus_per_node=4))
    assert hw.driver == hw.device_class == "gpu.nvidia.com"
    assert hw.nodes == {"gpu-node-0": 4, "gpu-node-1": 4, "real-node-0": 4}
    assert hw.attributes == {"productName": "NVIDIA H100 80GB HBM3", "driverVersion": "550.54.15"}


def test_the_plugin_reads_the_nodes_driver_root_and_names_the_cdi_hook_for_the_runtime():
    st = ClusterState(spec=ClusterSpec(driver="nvidia"), ports={}, binaries={},
                      nvidia={"gpu-node-0": {"version": "0.5.0", "profile": "h100", "root": "/s/nvidia/gpu-node-0",
                                             "plugin": "/b/gpu-kubelet-plugin", "hook": "/b/nvidia-cdi-hook"}})
    paths = commands.Paths(Path("/s"), Path("/s/kubeconfig"), None)  # type: ignore[arg-type]
    dirs = {"cdi": Path("/r/cdi"), "plugins": Path("/r/plugins"), "registrar": Path("/r/reg")}
    argv = commands.nvidia_plugin(st, paths, "gpu-node-0", dirs)
    assert argv[0] == "/b/gpu-kubelet-plugin"
    assert {"--nvidia-driver-root=/s/nvidia/gpu-node-0", "--cdi-root=/r/cdi", "--nvidia-cdi-hook-path=/b/nvidia-cdi-hook",
            "--healthcheck-port=-1", "--kubelet-registrar-directory-path=/r/reg",
            "--feature-gates=TimeSlicingSettings=true"} <= set(argv)


def test_the_emulated_nvidia_smi_records_the_time_slicing_calls_and_refuses_the_rest(tmp_path):
    """The plugin's two calls (gpu-kubelet-plugin's setComputeMode / setTimeSlice argv) are recorded in order."""
    import subprocess

    smi = tmp_path / "usr" / "bin" / "nvidia-smi"
    smi.parent.mkdir(parents=True)
    (tmp_path / emulated_gpus.SMI_CALLS).parent.mkdir(parents=True)
    smi.write_text(emulated_gpus.NVIDIA_SMI)
    smi.chmod(0o755)
    assert emulated_gpus.smi_calls(tmp_path) == []
    for argv in (["-i", "GPU-1", "-c", "DEFAULT"], ["compute-policy", "-i", "GPU-1", "--set-timeslice", "3"]):
        assert subprocess.run([str(smi), *argv]).returncode == 0
    refused = subprocess.run([str(smi), "-L"], capture_output=True, text=True)
    assert refused.returncode == 1 and "not emulated" in refused.stderr
    assert emulated_gpus.smi_calls(tmp_path) == ["-i GPU-1 -c DEFAULT", "compute-policy -i GPU-1 --set-timeslice 3"]
    # The chart's init container (kubelet-plugin-prestart.sh) asks for --version under `env -i` and waits for exit 0.
    version = subprocess.run(["env", "-i", str(smi), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and "550.54.15" in version.stdout
