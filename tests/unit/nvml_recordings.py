"""A scripted NVML (the real ``pynvml`` error classes, recorded device answers) and the scenarios behind fixtures/nvml/.

Each scenario is what NVML answered in one container; :class:`ScriptedNvml` replays it
to the probe script, so the script's own code paths (MIG slots, NotSupported queries,
init failures) run exactly as on a GPU node. ``python -m tests.unit.nvml_recordings``
rewrites the synthesized ``fixtures/nvml/*.log`` files from these scenarios; files
named ``real-*.log`` come from real runs (bench/nvml_probe_local.sh) and are never rewritten.
"""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path
from types import SimpleNamespace

import pynvml

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvml"
FIXED_TIME = "2026-11-29T20:00:00Z"
GiB = 1024**3
MiB = 1024**2


def err(code: str) -> pynvml.NVMLError:
    return pynvml.NVMLError(getattr(pynvml, f"NVML_ERROR_{code}"))


H100 = {"name": "NVIDIA H100 80GB HBM3", "total": 81559 * MiB}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "total": 81920 * MiB}
H100_UUIDS = [
    "GPU-5a4f0c1e-8d3b-4b6e-9f2a-7c1d2e3f4a5b",
    "GPU-9e2b7d44-31c6-4f0a-b8e5-0d6f2a91c3e7",
    "GPU-c03f8a12-6b7e-4d59-a1f2-e84b90d7c6a3",
    "GPU-17d6e9b0-f4a2-4c3e-8b1d-5a9c0e2f7b64",
]
H100_PCI = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0"]
A100_UUID = "GPU-2b8e4f6a-0c1d-4e7f-9a3b-6d5c8e1f0a24"
MIG_UUID = "MIG-0f9d1a2b-7c3e-5d84-a6b1-2e9f4c7d8a13"


def h100(i: int, used: int = 528 * MiB, processes=()) -> dict:
    return {**H100, "uuid": H100_UUIDS[i], "busId": H100_PCI[i], "used": used, "mig": err("NOT_SUPPORTED"),
            "compute": 0, "processes": list(processes)}


def _env(pod: str, node: str = "gpu-node-a") -> dict:
    return {"NODE_NAME": node, "POD_NAME": pod, "NVIDIA_VISIBLE_DEVICES": "void"}


SCENARIOS: dict[str, dict] = {
    # One full H100 allocated by a template claim (Hopper supports MIG, so the mode query answers (0, 0)).
    "full-gpu": {"env": _env("probe-full"), "devices": [{**h100(0), "mig": (0, 0)}]},
    # An A100 in MIG mode: the container sees its parent GPU and only the MIG device it holds (slot 2).
    "mig": {"env": _env("probe-mig", "gpu-node-b"), "devices": [{
        **A100, "uuid": A100_UUID, "busId": "00000000:07:00.0", "used": 0, "mig": (1, 1), "compute": 0,
        "processes": err("NO_PERMISSION"), "migSlots": 7,
        "migDevices": {2: {"uuid": MIG_UUID, "total": 9728 * MiB, "used": 13 * MiB}},
    }]},
    # Two pods share one claim (TimeSlicing): both see the same GPU and the other's process.
    "shared-pod-a": {"env": _env("shared-a"), "devices": [{**h100(1, used=3584 * MiB, processes=[(41721, 1 * GiB), (41988, 2 * GiB)]), "mig": (0, 0)}]},
    "shared-pod-b": {"env": _env("shared-b"), "devices": [{**h100(1, used=3584 * MiB, processes=[(41721, 1 * GiB), (41988, None)]), "mig": (0, 0)}]},
    # The NVIDIA library is there (bundled or injected) but no device node: NVML counts none.
    "no-gpu": {"env": _env("probe-no-claim"), "devices": []},
    # The library cannot talk to the kernel driver.
    "nvml-error": {"env": _env("probe-broken"), "init": err("DRIVER_NOT_LOADED")},
    # What an isolation failure looks like: every GPU of the node visible to a pod holding one
    # (a privileged pod, or a runtime that ignores CDI).
    "sees-all-gpus": {"env": _env("probe-privileged"), "devices": [{**h100(i), "mig": (0, 0)} for i in range(4)]},
}


class ScriptedNvml:
    """Enough of the pynvml module for the probe script, answering from a scenario."""

    def __init__(self, scenario: dict) -> None:
        self.s = scenario
        self.shut_down = False

    def nvmlInit(self):
        if "init" in self.s:
            raise self.s["init"]

    def nvmlShutdown(self):
        self.shut_down = True

    def nvmlSystemGetDriverVersion(self):
        return "570.133.20"

    def nvmlSystemGetNVMLVersion(self):
        return "12.570.133.20"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12080

    def nvmlDeviceGetCount(self):
        return len(self.s["devices"])

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def _dev(self, handle):
        kind, i, *slot = handle
        d = self.s["devices"][i]
        return d["migDevices"][slot[0]] if kind == "mig" else d

    @staticmethod
    def _answer(value):
        if isinstance(value, Exception):
            raise value
        return value

    def nvmlDeviceGetUUID(self, h):
        return self._dev(h)["uuid"]

    def nvmlDeviceGetName(self, h):
        return self._dev(h)["name"]

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._dev(h)["busId"].encode())  # pynvml's struct gives bytes

    def nvmlDeviceGetMemoryInfo(self, h):
        d = self._dev(h)
        return SimpleNamespace(total=d["total"], used=d["used"], free=d["total"] - d["used"])

    def nvmlDeviceGetMigMode(self, h):
        return list(self._answer(self._dev(h)["mig"]))

    def nvmlDeviceGetComputeMode(self, h):
        return self._dev(h)["compute"]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        procs = self._answer(self._dev(h)["processes"])
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in procs]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return self._dev(h).get("migSlots", 0)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, slot):
        if slot not in self._dev(h).get("migDevices", {}):
            raise err("NOT_FOUND")
        return ("mig", h[1], slot)


def run_probe(name: str) -> tuple[dict, str]:
    """The probe script's report and stdout for one scenario (time fixed for golden files)."""
    from dra_harness.checks import nvml_probe_script as script

    scenario = SCENARIOS[name]
    report = script.collect(ScriptedNvml(scenario), environ=scenario["env"])
    report["time"] = FIXED_TIME
    text = json.dumps(report, separators=(",", ":"), sort_keys=True)
    return report, f"{script.MARKER} {text}\n"


def write_fixtures() -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for name in SCENARIOS:
        _, line = run_probe(name)
        (FIXTURES / f"{name}.log").write_text(line)


if __name__ == "__main__":
    buf = io.StringIO()
    with redirect_stdout(buf):
        write_fixtures()
    sys.stdout.write(f"wrote {len(SCENARIOS)} fixtures to {FIXTURES}\n")
