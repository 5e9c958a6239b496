"""The emulated NVML library, built here and loaded by the real NVML client (pynvml) in a fresh process.

What NVIDIA's driver and our GPU-visibility probe will rely on: an 8-GPU node's properties as NVIDIA's
mocks define them, UUIDs stable per node seed across processes, and a process seeing exactly the GPUs
whose device nodes it was given — so the probe's check can fail when a container sees a GPU it was not
allocated (the negative control here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dra_harness.checks import nvml_probe
from dra_harness.components import nvml
from dra_harness.errors import InputError

PROBE = Path(nvml_probe.__file__).with_name("nvml_probe_script.py")

READ = """
import ctypes, json, pynvml as n
n.nvmlInit()
out = {"driver": n.nvmlSystemGetDriverVersion(), "gpus": []}
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    major, minor = n.nvmlDeviceGetCudaComputeCapability(h)
    try:
        profile = n.nvmlDeviceGetGpuInstanceProfileInfo(h, n.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
        count = ctypes.c_uint(0)
        n.nvmlDeviceGetGpuInstancePossiblePlacements(h, n.NVML_GPU_INSTANCE_PROFILE_1_SLICE, None, ctypes.byref(count))
        places = (n.c_nvmlGpuInstancePlacement_t * count.value)()
        n.nvmlDeviceGetGpuInstancePossiblePlacements(h, n.NVML_GPU_INSTANCE_PROFILE_1_SLICE, places, ctypes.byref(count))
        mig = {"mode": n.nvmlDeviceGetMigMode(h)[0], "1-slice MiB": profile.memorySizeMB, "1-slice count": profile.instanceCount,
               "1-slice name": profile.name if isinstance(profile.name, str) else profile.name.decode(),
               "1-slice starts": [p.start for p in places]}
    except n.NVMLError as e:
        mig = str(e)
    try:
        n.nvmlDeviceGetPowerUsage(h)
        power = "answered"
    except n.NVMLError as e:
        power = str(e)
    out["gpus"].append({"name": n.nvmlDeviceGetName(h), "uuid": n.nvmlDeviceGetUUID(h), "minor": n.nvmlDeviceGetMinorNumber(h),
                        "bus": n.nvmlDeviceGetPciInfo(h).busId, "memory": n.nvmlDeviceGetMemoryInfo(h).total,
                        "cc": f"{major}.{minor}", "arch": n.nvmlDeviceGetArchitecture(h), "mig": mig, "power": power,
                        "by_uuid": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(n.nvmlDeviceGetUUID(h)))})
n.nvmlShutdown()
print(json.dumps(out))
"""


def nodes(tmp_path: Path, minors: list[int]) -> Path:
    """A device directory holding ``nvidia<minor>`` for each minor (plain files: the library only looks)."""
    dev = tmp_path / f"dev-{'-'.join(map(str, minors))}"
    dev.mkdir()
    for m in minors:
        (dev / f"nvidia{m}").touch()
    return dev


def run(lib: nvml.Library, dev: Path, script: str | Path, **env: str) -> str:
    argv = [sys.executable, str(script)] if isinstance(script, Path) else [sys.executable, "-c", script]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "LD_LIBRARY_PATH": str(lib.path.parent), "DRA_HARNESS_NVML_DEV_ROOT": str(dev), **env})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture(scope="module")
def h100() -> nvml.Library:
    return nvml.build("h100", "node-a")


def test_pynvml_sees_eight_h100s_with_nvidia_s_properties_and_answers_not_supported_for_the_rest(h100, tmp_path):
    out = json.loads(run(h100, nodes(tmp_path, list(range(8))), READ))
    gpus = out["gpus"]
    assert len(gpus) == 8 and out["driver"] == "550.54.15"
    assert {g["name"] for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {g["memory"] for g in gpus} == {80 * 1024**3} and {g["cc"] for g in gpus} == {"9.0"}
    assert {g["arch"] for g in gpus} == {9}  # NVML_DEVICE_ARCH_HOPPER
    assert [g["minor"] for g in gpus] == list(range(8)) and [g["by_uuid"] for g in gpus] == list(range(8))
    assert len({g["uuid"] for g in gpus}) == 8 and all(g["uuid"].startswith("GPU-") for g in gpus)
    assert len({g["bus"] for g in gpus}) == 8
    assert {g["power"] for g in gpus} == {"Not Supported"}  # not emulated: an answer, not a missing symbol
    assert gpus[0]["mig"]["mode"] == 0 and gpus[0]["mig"]["1-slice count"] == 7  # H100 is MIG-capable, mode off


def test_uuids_are_the_node_s_own_stable_across_processes_and_differ_between_nodes(h100, tmp_path):
    dev = nodes(tmp_path, list(range(8)))
    first = [g["uuid"] for g in json.loads(run(h100, dev, READ))["gpus"]]
    assert [g["uuid"] for g in json.loads(run(h100, dev, READ))["gpus"]] == first
    other = [g["uuid"] for g in json.loads(run(nvml.build("h100", "node-b"), dev, READ))["gpus"]]
    assert not set(first) & set(other)
    # The seed baked in at build time can be overridden (a test's own node).
    assert [g["uuid"] for g in json.loads(run(h100, dev, READ, DRA_HARNESS_NVML_SEED="node-b"))["gpus"]] == other


def test_a_process_sees_only_the_gpus_whose_device_nodes_it_was_given_and_the_probe_check_catches_an_extra_one(h100, tmp_path):
    every = {g["minor"]: g["uuid"] for g in json.loads(run(h100, nodes(tmp_path, list(range(8))), READ))["gpus"]}
    given = [2, 5]
    report = nvml_probe.parse(run(h100, nodes(tmp_path, given), PROBE))
    assert sorted(g.uuid for g in report.gpus) == sorted(every[m] for m in given)
    allocated = [nvml_probe.AllocatedGpu(f"gpu-{m}", every[m], None) for m in given]
    assert nvml_probe.compare(report, allocated) == []
    # Negative control: the container was also given GPU 7's device node; the check names the GPU it should not see.
    leaked = nvml_probe.parse(run(h100, nodes(tmp_path, [*given, 7]), PROBE))
    problems = nvml_probe.compare(leaked, allocated)
    assert problems and every[7] in " ".join(problems), problems


def test_the_a100_profiles_carry_nvidia_s_mig_profiles_and_mig_mode(tmp_path):
    dev = nodes(tmp_path, list(range(8)))
    off = json.loads(run(nvml.build("a100", "node-a"), dev, READ))["gpus"]
    on = json.loads(run(nvml.build("a100-mig", "node-a"), dev, READ))["gpus"]
    assert {g["name"] for g in off} == {"NVIDIA A100-SXM4-80GB"} and {g["cc"] for g in off} == {"8.0"}
    assert off[0]["mig"]["mode"] == 0 and on[0]["mig"]["mode"] == 1
    assert off[0]["mig"]["1-slice count"] == 7 and 9000 < off[0]["mig"]["1-slice MiB"] < 11000
    assert off[0]["mig"]["1-slice name"] == "MIG 1g.10gb"
    assert off[0]["mig"]["1-slice starts"] == list(range(7))  # NVIDIA's placements: one per memory slice


def test_a_profile_or_seed_it_does_not_know_is_one_line():
    with pytest.raises(InputError, match="profile 'v100'"):
        nvml.build("v100")
    with pytest.raises(InputError, match="seed"):
        nvml.build("h100", "../x")


def test_the_stubs_cover_every_declared_function_the_shim_does_not_define():
    header = "nvmlReturn_t DECLDIR nvmlA(int x);\nnvmlReturn_t DECLDIR nvmlB(void);\n"
    text = nvml.stubs(header, {"nvmlA"})
    assert "int nvmlB(void)" in text and "nvmlA(" not in text.split("emu_trace")[-1].split("\n", 1)[1]


def test_the_driver_version_python_names_is_the_one_the_library_reports():
    source = (nvml.source_dir() / "emulation.go").read_text()
    assert f'driverVersion     = "{nvml.DRIVER_VERSION}"' in source
