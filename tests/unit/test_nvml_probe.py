"""The NVML probe on recorded NVML answers: the in-pod script, its report, and the check against claims.

No GPU is involved: ``nvml_recordings`` replays what NVML answered in each situation
(full GPU, MIG, two pods time-slicing one GPU, no GPU, NVML broken, a pod that sees
every GPU) through the real probe script; the resulting outputs are the fixtures in
fixtures/nvml/, next to ResourceSlices as NVIDIA's driver publishes them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dra_harness.checks import nvml_probe
from dra_harness.checks import nvml_probe_script as script
from dra_harness.checks.nvml_probe import (
    ProbeOutputError,
    allocated_gpus,
    compare,
    normal_pci,
    parse,
)
from dra_harness.providers.profiles import by_name

from .nvml_recordings import (
    FIXTURES,
    H100_UUIDS,
    MIG_UUID,
    SCENARIOS,
    ScriptedNvml,
    err,
    h100,
    run_probe,
)

NVIDIA = by_name("nvidia")


def fixture(name: str) -> str:
    return (FIXTURES / f"{name}.log").read_text()


def published() -> dict:
    out = {}
    for s in yaml.safe_load_all((FIXTURES / "resourceslices.yaml").read_text()):
        for d in s["spec"]["devices"]:
            out[(s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])] = {"node": s["spec"]["nodeName"], "device": d}
    return out


def claim_holding(*devices: str) -> dict:
    """A claim whose allocation holds ``pool/device`` entries of the nvidia driver."""
    results = [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": d.split("/")[0], "device": d.split("/")[1]} for d in devices]
    return {"metadata": {"name": "c", "namespace": "ns"}, "status": {"allocation": {"devices": {"results": results}}}}


def check(log_name: str, *devices: str, slices: dict | None = None) -> list[str]:
    claims = [claim_holding(*devices)] if devices else []
    return compare(parse(fixture(log_name)), allocated_gpus(claims, slices or published(), NVIDIA))


# -- the script on recorded NVML answers ----------------------------------------------------
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_script_reproduces_each_recorded_output(name):
    assert run_probe(name)[1] == fixture(name), f"fixtures/nvml/{name}.log: rerun `python -m tests.unit.nvml_recordings`"


def test_mig_reports_only_the_occupied_slots_and_keeps_query_errors():
    report, _ = run_probe("mig")
    gpu = report["devices"][0]
    assert gpu["migMode"] == {"current": 1, "pending": 1}
    assert [m["slot"] for m in gpu["migDevices"]] == [2] and gpu["migDevices"][0]["uuid"] == MIG_UUID
    assert gpu["processes"] is None and gpu["errors"]["processes"] == "NVMLError_NoPermission: Insufficient Permissions"


def test_a_gpu_without_mig_support_reports_null_mig_mode_with_the_reason():
    nvml = ScriptedNvml({"devices": [h100(0)]})
    gpu = script.collect(nvml, environ={})["devices"][0]
    assert gpu["migMode"] is None and gpu["errors"]["migMode"] == "NVMLError_NotSupported: Not Supported"
    assert gpu["pciBusId"] == "00000000:18:00.0"  # bytes from pynvml's struct become text
    assert nvml.shut_down


def test_init_failure_is_the_answer_not_a_crash():
    report = script.collect(ScriptedNvml({"init": err("LIBRARY_NOT_FOUND")}), environ={})
    assert report["error"] == {"call": "nvmlInit", "type": "NVMLError_LibraryNotFound", "message": "NVML Shared Library Not Found"}
    assert report["devices"] == []


def test_an_image_without_nvidia_ml_py_says_so():
    report = script.collect(script._Missing(ImportError("No module named 'pynvml'")), environ={})
    assert report["error"]["type"] == "ModuleNotFoundError" and "nvidia-ml-py" in report["error"]["message"]


def test_shared_processes_keep_unknown_memory_as_null():
    procs = run_probe("shared-pod-b")[0]["devices"][0]["processes"]
    assert procs == [{"pid": 41721, "usedGpuMemory": 1024**3}, {"pid": 41988, "usedGpuMemory": None}]


def test_the_termination_message_fits_4k_and_still_names_every_gpu(tmp_path, monkeypatch, capsys):
    many = {"env": {}, "devices": [
        {**h100(i % 4, processes=[(1000 + j, 1) for j in range(40)]), "uuid": f"GPU-{i:08d}-0000-0000-0000-000000000000", "mig": (0, 0)}
        for i in range(8)
    ]}
    log = tmp_path / "termination-log"
    log.write_text("")
    monkeypatch.setattr(script, "TERMINATION_LOG", str(log))
    import pynvml
    monkeypatch.setattr(pynvml, "nvmlInit", ScriptedNvml(many).nvmlInit)
    for attr in dir(ScriptedNvml):
        if attr.startswith("nvml"):
            monkeypatch.setattr(pynvml, attr, getattr(ScriptedNvml(many), attr))
    assert script.main() == 0
    message = log.read_text()
    assert len(message.encode()) <= script.TERMINATION_LIMIT
    small = json.loads(message)
    assert small["truncated"] is True and len(small["devices"]) == 8
    full = parse(capsys.readouterr().out)
    assert len(full.gpus) == 8 and full.gpus[0].processes == 40
    assert parse(message).uuids == full.uuids  # the parser reads either form


# -- parsing ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.log")), ids=lambda p: p.name)
def test_every_recorded_output_parses(path: Path):
    report = parse(path.read_text())
    assert report.raw["format"] == nvml_probe.FORMAT
    assert (report.error is None) or not report.gpus


def test_the_report_is_found_after_other_log_lines():
    text = "Collecting nvidia-ml-py\nsome warning\n" + fixture("full-gpu")
    assert parse(text).uuids == {H100_UUIDS[0]}


@pytest.mark.parametrize("output, message", [
    ("", "no NVML probe report in the pod's output (last line: 'empty output')"),
    ("python3: can't open file '/dra-harness-probe/nvml_probe.py'\n", "no NVML probe report in the pod's output (last line: \"python3: can't open file"),
    ('{"format": "something-else"}', "not an NVML probe report (format 'something-else')"),
])
def test_output_without_a_report_is_one_line(output, message):
    with pytest.raises(ProbeOutputError) as e:
        parse(output)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


@pytest.mark.parametrize("raw, normal", [
    ("00000000:1B:00.0", "0000:1b:00.0"),
    ("0000:1b:00.0", "0000:1b:00.0"),
    ("00000001:C3:1F.7", "0001:c3:1f.7"),
    (None, None),
])
def test_pci_bus_ids_from_nvml_and_slices_compare_equal(raw, normal):
    assert normal_pci(raw) == normal


# -- the check against claims -------------------------------------------------------------------
def test_a_container_that_sees_exactly_its_gpu_passes():
    assert check("full-gpu", "gpu-node-a/gpu-0") == []


def test_a_container_that_sees_gpus_it_does_not_hold_fails_for_each():
    problems = check("sees-all-gpus", "gpu-node-a/gpu-0")
    assert problems == [f"the container sees {u}, which its claims do not hold" for u in sorted(H100_UUIDS[1:])]


def test_the_wrong_gpu_is_both_an_extra_and_a_missing_one():
    problems = check("full-gpu", "gpu-node-a/gpu-1")
    assert problems == [f"the container sees {H100_UUIDS[0]}, which its claims do not hold",
                        f"the container does not see {H100_UUIDS[1]}, which its claims hold"]


def test_a_mig_claim_is_checked_by_the_mig_device_uuid():
    assert check("mig", "gpu-node-b/gpu-0-mig-1g10gb-19-2") == []
    assert check("mig", "gpu-node-a/gpu-0") == [
        f"the container sees {MIG_UUID}, which its claims do not hold",
        f"the container does not see {H100_UUIDS[0]}, which its claims hold",
    ]


def test_pods_sharing_a_claim_see_the_same_gpu():
    a, b = parse(fixture("shared-pod-a")), parse(fixture("shared-pod-b"))
    assert a.units == b.units == {H100_UUIDS[1]}
    assert check("shared-pod-a", "gpu-node-a/gpu-1") == check("shared-pod-b", "gpu-node-a/gpu-1") == []
    assert a.gpus[0].processes == 2  # the co-tenant is visible: sharing is not isolation


def test_no_gpu_is_right_without_a_claim_and_wrong_with_one():
    assert check("no-gpu") == []
    assert check("no-gpu", "gpu-node-a/gpu-2") == [f"the container does not see {H100_UUIDS[2]}, which its claims hold"]


def test_an_nvml_failure_is_reported_as_such():
    problems = check("nvml-error", "gpu-node-a/gpu-0")
    assert problems == [f"NVML failed in the pod (nvmlInit: NVMLError_DriverNotLoaded: Driver Not Loaded); allocated {H100_UUIDS[0]}"]


def test_a_pci_bus_id_disagreement_is_reported():
    slices = published()
    slices[("gpu.nvidia.com", "gpu-node-a", "gpu-0")]["device"]["attributes"]["resource.kubernetes.io/pciBusID"] = {"string": "0000:99:00.0"}
    assert check("full-gpu", "gpu-node-a/gpu-0", slices=slices) == [f"{H100_UUIDS[0]}: slice says PCI 0000:99:00.0, NVML says 0000:18:00.0"]


def test_a_device_missing_from_the_slices_cannot_pass():
    assert check("full-gpu", "gpu-node-a/gpu-9")[0] == "allocated devices without a published uuid attribute: gpu.nvidia.com/gpu-node-a/gpu-9"


# -- the objects ---------------------------------------------------------------------------
def test_the_probe_pod_is_unprivileged_and_runs_the_configmap_script():
    cm = nvml_probe.configmap("probe-script", "run1")
    assert cm["data"][nvml_probe.SCRIPT_KEY] == nvml_probe.SCRIPT_PATH.read_text()
    pod = nvml_probe.pod("probe", "run1", "python-nvml:1", "probe-script", {"gpu": {"template": "one-gpu"}})
    spec = pod["spec"]
    ctr = spec["containers"][0]
    assert ctr["securityContext"]["privileged"] is False and ctr["securityContext"]["allowPrivilegeEscalation"] is False
    assert ctr["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert ctr["command"] == ["python3", f"{nvml_probe.MOUNT}/{nvml_probe.SCRIPT_KEY}"]
    assert spec["volumes"][0]["configMap"]["name"] == "probe-script"
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    assert ctr["resources"]["claims"] == [{"name": "gpu"}]
    assert spec["restartPolicy"] == "Never"
    assert pod["metadata"]["labels"]["dra-harness.io/run"] == "run1"


def test_a_probe_pod_without_claims_requests_nothing():
    spec = nvml_probe.pod("bare", "run1", "img", "cm")["spec"]
    assert "resourceClaims" not in spec and spec["containers"][0]["resources"]["claims"] == []


def test_a_held_probe_is_ready_exactly_when_its_report_is_written(tmp_path):
    """The readiness command is run as the kubelet would, on the termination log before and after the report."""
    import subprocess
    import sys

    ctr = nvml_probe.pod("held", "run1", "img", "cm", {"gpu": {"template": "one-gpu"}}, hold=True)["spec"]["containers"][0]
    assert {"name": script.HOLD_ENV, "value": "1"} in ctr["env"] and script.HOLD_ENV == nvml_probe.HOLD_ENV
    assert script.TERMINATION_LOG == nvml_probe.TERMINATION_LOG
    command = [sys.executable, *ctr["readinessProbe"]["exec"]["command"][1:]]
    log = tmp_path / "termination-log"
    command[-1] = command[-1].replace(nvml_probe.TERMINATION_LOG, str(log))
    log.write_text("")  # the kubelet creates it empty
    assert subprocess.run(command).returncode != 0
    log.write_text('{"devices":[]}')
    assert subprocess.run(command).returncode == 0
    assert "readinessProbe" not in nvml_probe.pod("once", "run1", "img", "cm")["spec"]["containers"][0]


def test_a_held_probe_keeps_running_after_its_report(monkeypatch):
    """Held, the script reports and then sleeps until deleted (its claims stay allocated meanwhile)."""
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", script.HOLD_ENV: "1"}
    proc = subprocess.Popen([sys.executable, str(nvml_probe.SCRIPT_PATH)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith(nvml_probe.MARKER)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1)
    finally:
        proc.kill()
        proc.wait()


def test_a_driver_that_refuses_the_configs_strategy_is_not_established_but_other_prepare_failures_are_not():
    gate = ('Failed to prepare dynamic resources: NodePrepareResources: "TimeSlicing" is selected as the GPU sharing '
            'strategy, but the "TimeSlicingSettings" feature gate is not enabled')
    refused = {"type": "Warning", "reason": "FailedPrepareDynamicResources", "message": gate}
    timeout = {"type": "Warning", "reason": "FailedPrepareDynamicResources",
               "message": "NodePrepareResources: rpc error: code = DeadlineExceeded"}
    assert nvml_probe.config_refusal([timeout, refused]) == gate
    assert nvml_probe.config_refusal([timeout]) is None  # a product failure: the wait goes on and explains itself
    assert nvml_probe.config_refusal([{**refused, "type": "Normal"}]) is None


def test_a_running_probe_is_reported_only_when_held_and_ready():
    """Without a readiness probe a running pod is Ready at once: that must not end a run-once probe's wait."""
    running = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    assert nvml_probe._reported(running, held=True) and not nvml_probe._reported(running, held=False)
    assert nvml_probe._reported({"status": {"phase": "Succeeded"}}, held=False)


def _versions_report(driver: str, cuda: int):
    return nvml_probe.ProbeReport(raw={"nvml": {"driverVersion": driver, "cudaDriverVersion": cuda}})


def _device(driver: str | None, cuda: str | None) -> dict:
    attrs = {}
    if driver is not None:
        attrs["driverVersion"] = {"version": driver}
    if cuda is not None:
        attrs["cudaDriverVersion"] = {"version": cuda}
    return {"name": "gpu-0", "attributes": attrs}


def test_versions_the_slice_advertises_match_nvml_in_the_container():
    assert nvml_probe.version_problems(_versions_report("550.54.15", 12040), [_device("550.54.15", "12.4.0")], NVIDIA) == []


def test_a_slice_advertising_another_driver_or_cuda_version_is_named():
    """Negative control: a driver upgraded on the node while the slice still says the old one."""
    problems = nvml_probe.version_problems(_versions_report("560.35.03", 12060), [_device("550.54.15", "12.4.0")], NVIDIA)
    assert problems == ["gpu-0: the slice says driver 550.54.15, NVML in the container says 560.35.03",
                        "gpu-0: the slice says CUDA driver 12.4.0, NVML in the container says 12.6"]
    assert nvml_probe.version_problems(_versions_report("550.54.15", 12040), [_device(None, None)], NVIDIA) == [
        "gpu-0 publishes no driverVersion or cudaDriverVersion attribute"]
