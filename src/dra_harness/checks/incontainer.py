"""What a container actually sees of its devices, compared with what its claim says.

The example driver injects ``GPU_DEVICE_<id>=<device>`` (and, from an opaque
``GpuConfig``, ``GPU_DEVICE_<id>_SHARING_STRATEGY``, ``..._TIMESLICE_INTERVAL``,
``..._PARTITION_COUNT``) through CDI. A probe container prints its environment once
and then sleeps, so the view can be read from its log while it keeps running. The
comparison is pure, so a wrong view is caught the same way in unit tests.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from dra_harness.kube import builders, rest
from dra_harness.kube.rest import Kube
from dra_harness.errors import CheckError
from dra_harness.retrying import NotYet, until

log = logging.getLogger(__name__)

#: Printed after the environment: the log is complete once it appears.
DONE = "probe-done"
#: The driver's variables: ``GPU_DEVICE_*`` per device, ``DRA_*`` per claim (``DRA_ADMIN_ACCESS``).
PRINT_ENV = f"env | grep -e '^GPU_DEVICE' -e '^DRA_' | sort; echo {DONE}"
PROBE_COMMAND = ["sh", "-c", f"{PRINT_ENV}; exec sleep 3600"]
#: Where no locally imported workload image exists (a real cluster), a public busybox.
_DEVICE_VAR = re.compile(r"^GPU_DEVICE_([A-Z0-9_]+?)=(.*)$")


class ProbeError(CheckError):
    """The probe's log never completed; says what the log held."""


def probe_pod(name: str, run_id: str, image: str, node: str | None, claims: dict[str, dict[str, str]],
              containers: int = 1) -> dict[str, Any]:
    """A pod whose containers print their ``GPU_DEVICE_*`` environment and keep running."""
    body = builders.pod(name, run_id, claims=claims, containers=containers, node_name=node, image=image)
    for c in body["spec"]["containers"]:
        c["command"] = PROBE_COMMAND
    return body


def gpu_env(log: str) -> dict[str, str]:
    """``GPU_DEVICE_*`` and ``DRA_*`` variables from a probe log."""
    env = {}
    for line in log.splitlines():
        if line.startswith(("GPU_DEVICE_", "DRA_")) and "=" in line:
            k, v = line.split("=", 1)
            env[k] = v
    return env


def devices_seen(env: dict[str, str]) -> set[str]:
    """Device names a container was given (``GPU_DEVICE_<id>``, not its ``_<SETTING>`` siblings)."""
    seen = set()
    for key, value in env.items():
        suffix = key[len("GPU_DEVICE_"):]
        # A device variable's value is the device's own name, whose id the key carries.
        if value.startswith("gpu-") and suffix == value[4:].upper().replace("-", "_"):
            seen.add(value)
    return seen


def claim_uids(env: dict[str, str]) -> set[str]:
    """Claim UIDs the driver stamped into the container (``GPU_DEVICE_*_RESOURCE_CLAIM``, example driver v0.4+)."""
    return {v for k, v in env.items() if k.endswith("_RESOURCE_CLAIM")}


def settings(env: dict[str, str], device: str) -> dict[str, str]:
    """The per-device settings (``SHARING_STRATEGY``, ``TIMESLICE_INTERVAL``...) of one device."""
    prefix = f"GPU_DEVICE_{device[4:].upper().replace('-', '_')}_"
    return {k[len(prefix):]: v for k, v in env.items() if k.startswith(prefix)}


def mismatch(seen: set[str], allocated: set[str]) -> str | None:
    """Why a container's view differs from its claim's allocation, or None when it matches."""
    if seen == allocated:
        return None
    extra, missing = sorted(seen - allocated), sorted(allocated - seen)
    return f"container sees {sorted(seen)}, claim allocated {sorted(allocated)} (extra {extra}, missing {missing})"


def read_env(kube: Kube, namespace: str, pod: str, container: str, timeout: float = 60.0) -> dict[str, str]:
    """Wait until the probe container has printed its environment; return its GPU variables."""

    def attempt() -> dict[str, str]:
        try:  # the container may not have started yet, or the API server be away a moment
            text = kube.raw(f"/api/v1/namespaces/{namespace}/pods/{pod}/log?container={container}")
        except (rest.ApiError, rest.Unreachable) as e:
            raise NotYet(str(e)) from None
        if DONE not in text:
            raise NotYet(f"log so far: {text[-300:]!r}")
        return gpu_env(text)

    try:
        return until(time.monotonic() + timeout, 0.5, log, f"the environment of {namespace}/{pod}/{container}")(attempt)
    except NotYet as last:
        raise ProbeError(f"{namespace}/{pod}/{container} printed no complete environment in {timeout:.0f}s; {last}") from None
