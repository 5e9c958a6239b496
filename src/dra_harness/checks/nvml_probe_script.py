#!/usr/bin/env python3
"""NVML probe: what GPUs does this container see? Runs inside an unprivileged pod (or on a host).

Delivered to the pod by ConfigMap and run by any image with Python 3 and
``nvidia-ml-py`` (module ``pynvml``). Only the standard library and pynvml are used,
so the script is self-contained. It never fails on an NVML error: the error is part
of the report, because "the container has no NVML" is itself the answer to "did
this pod get a GPU?". Output:

* stdout: one line ``DRA_HARNESS_NVML_PROBE <json>`` (the full report);
* ``/dev/termination-log`` (if writable): the same JSON, reduced to fit the kubelet's
  4 KiB limit when needed (``"truncated": true``).

Indices are meaningless across containers (NVML renumbers from 0), so the report
carries UUIDs and PCI bus IDs; process PIDs are host PIDs, so they are reported but
only their count and memory mean something inside a container.
"""

from __future__ import annotations

import json
import os
import sys
import time

MARKER = "DRA_HARNESS_NVML_PROBE"
FORMAT = "dra-harness.io/nvml-probe/v1"
TERMINATION_LOG = "/dev/termination-log"
TERMINATION_LIMIT = 4096
#: Set by the harness: after reporting, hold the pod running (its readiness says the report is written).
HOLD_ENV = "DRA_HARNESS_PROBE_HOLD"
ENV_KEYS = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY",
            "NVIDIA_DRIVER_CAPABILITIES")
COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}


def _text(value):
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _error(exc):
    return {"type": type(exc).__name__, "message": str(exc)}


def _try(errors, key, call, *args):
    """One optional query; its failure is recorded under ``errors[key]``, never raised."""
    try:
        return call(*args)
    except Exception as exc:  # noqa: BLE001 - every NVML error class is an answer
        errors[key] = f"{type(exc).__name__}: {exc}"
        return None


def _memory(nvml, handle, errors, key="memory"):
    info = _try(errors, key, nvml.nvmlDeviceGetMemoryInfo, handle)
    return None if info is None else {"total": int(info.total), "used": int(info.used)}


def _processes(nvml, handle, errors):
    procs = _try(errors, "processes", nvml.nvmlDeviceGetComputeRunningProcesses, handle)
    if procs is None:
        return None
    return [{"pid": int(p.pid), "usedGpuMemory": None if p.usedGpuMemory is None else int(p.usedGpuMemory)} for p in procs]


def _mig_devices(nvml, handle, errors):
    count = _try(errors, "maxMigDeviceCount", nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
    out = []
    for slot in range(count):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except Exception:  # noqa: BLE001 - NVMLError_NotFound marks an empty slot
            continue
        mig_errors: dict[str, dict] = {}
        out.append({
            "slot": slot,
            "uuid": _text(_try(mig_errors, "uuid", nvml.nvmlDeviceGetUUID, mig)),
            "memory": _memory(nvml, mig, mig_errors),
            "errors": mig_errors,
        })
    return out


def _device(nvml, index):
    errors: dict[str, dict] = {}
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    pci = _try(errors, "pciInfo", nvml.nvmlDeviceGetPciInfo, handle)
    mig_mode = _try(errors, "migMode", nvml.nvmlDeviceGetMigMode, handle)
    compute = _try(errors, "computeMode", nvml.nvmlDeviceGetComputeMode, handle)
    device = {
        "index": index,
        "uuid": _text(_try(errors, "uuid", nvml.nvmlDeviceGetUUID, handle)),
        "name": _text(_try(errors, "name", nvml.nvmlDeviceGetName, handle)),
        "pciBusId": _text(pci.busId) if pci is not None else None,
        "memory": _memory(nvml, handle, errors),
        # NotSupported on GPUs without MIG: reported as null with the error kept.
        "migMode": None if mig_mode is None else {"current": int(mig_mode[0]), "pending": int(mig_mode[1])},
        "computeMode": None if compute is None else COMPUTE_MODES.get(int(compute), str(compute)),
        "processes": _processes(nvml, handle, errors),
        "migDevices": [],
        "errors": errors,
    }
    if device["migMode"] and device["migMode"]["current"] == 1:
        device["migDevices"] = _mig_devices(nvml, handle, errors)
    return device


def collect(nvml, environ=os.environ):
    """The report, from an NVML binding (``pynvml``, or a recording in tests)."""
    report = {
        "format": FORMAT,
        "node": environ.get("NODE_NAME"),
        "pod": environ.get("POD_NAME"),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "env": {k: environ.get(k) for k in ENV_KEYS},
        "nvml": None,
        "devices": [],
        "error": None,
    }
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no library, no driver, no device: all answers
        report["error"] = {"call": "nvmlInit", **_error(exc)}
        return report
    try:
        versions: dict[str, dict] = {}
        report["nvml"] = {
            "driverVersion": _text(_try(versions, "driverVersion", nvml.nvmlSystemGetDriverVersion)),
            "nvmlVersion": _text(_try(versions, "nvmlVersion", nvml.nvmlSystemGetNVMLVersion)),
            "cudaDriverVersion": _try(versions, "cudaDriverVersion", nvml.nvmlSystemGetCudaDriverVersion),
            "errors": versions,
        }
        try:
            count = nvml.nvmlDeviceGetCount()
            report["devices"] = [_device(nvml, i) for i in range(count)]
        except Exception as exc:  # noqa: BLE001
            report["error"] = {"call": "nvmlDeviceGetCount/GetHandleByIndex", **_error(exc)}
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - nothing useful to add
            pass
    return report


def reduced(report):
    """What fits a termination message: identities only."""
    small = {k: report[k] for k in ("format", "node", "pod", "error")}
    small["truncated"] = True
    small["devices"] = [
        {"uuid": d["uuid"], "pciBusId": d["pciBusId"], "migMode": d["migMode"],
         "migDevices": [{"uuid": m["uuid"]} for m in d["migDevices"]]}
        for d in report["devices"]
    ]
    return small


def main():
    try:
        import pynvml as nvml
    except ImportError as exc:
        report = collect(_Missing(exc))
    else:
        report = collect(nvml)
    text = json.dumps(report, separators=(",", ":"), sort_keys=True)
    print(f"{MARKER} {text}", flush=True)
    message = text if len(text.encode()) <= TERMINATION_LIMIT else json.dumps(reduced(report), separators=(",", ":"))
    # The kubelet mounts the file into the pod; elsewhere (a host run) it is not created.
    if os.path.exists(TERMINATION_LOG):
        try:
            with open(TERMINATION_LOG, "w") as f:
                f.write(message[:TERMINATION_LIMIT])
        except OSError:
            pass  # stdout carries the report
    if os.environ.get(HOLD_ENV):
        # Keep the pod (and so its claims' allocation) until it is deleted: the harness runs another pod beside it.
        while True:
            time.sleep(3600)
    return 0


class _Missing:
    """Stands in for pynvml when the image lacks nvidia-ml-py, so the report says so."""

    def __init__(self, exc):
        self.exc = exc

    def nvmlInit(self):
        raise ModuleNotFoundError(f"pynvml is not installed in this image (pip install nvidia-ml-py): {self.exc}")


if __name__ == "__main__":
    sys.exit(main())
