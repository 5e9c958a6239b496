"""Emulated NVIDIA GPUs on a node: the driver root NVIDIA's plugin and containers read.

Why here, among the components, and not in a provider: the embedded cluster starts NVIDIA's plugin
over such a root at bring-up and swaps it onto a running node
(:mod:`dra_harness.providers.embedded.nvidia_driver`), and a kind cluster copies one into each of
its nodes for the chart's pods (:mod:`dra_harness.providers.kind.nvidia`): both providers build the
same root, and neither imports the other.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from dra_harness.components import build as builder
from dra_harness.components import catalog, nvml

GPUS = 8
LIB_DIR = "usr/lib/x86_64-linux-gnu"
#: NVIDIA's kernel module's character devices: /dev/nvidia<minor> and /dev/nvidiactl (minor 255).
NVIDIA_MAJOR = 195
CTL_MINOR = 255
#: Where the emulated nvidia-smi records the settings it was asked to apply, under the driver root.
SMI_CALLS = "var/log/nvidia-smi.calls"
#: NVIDIA's plugin applies time-slicing with ``nvidia-smi -i UUID -c MODE`` and ``compute-policy -i UUID
#: --set-timeslice N``: those are recorded (no GPU to apply them to), so a check can see what the driver did (where
#: the driver root is read-only, as in the chart's pod, the record is lost and the call still succeeds).
#: ``--version`` answers as the chart's init container asks it; anything else is refused, as a GPU-less nvidia-smi would.
NVIDIA_SMI = f"""#!/bin/sh
case "$*" in
  "-i "*" -c "*|"compute-policy -i "*" --set-timeslice "*)
    echo "$*" >> "$(dirname "$0")/../../{SMI_CALLS}"; exit 0;;
  --version)
    echo "NVIDIA-SMI version  : {nvml.DRIVER_VERSION} (dra-harness emulated GPUs)"; exit 0;;
esac
echo "nvidia-smi $*: not emulated (dra-harness emulated GPUs)" >&2
exit 1
"""


def driver_root(root: Path, profile: str, seed: str, gpus: int = GPUS, char_devices: bool = False) -> Path:
    """A driver root at ``root``: the emulated NVML with GPU identities drawn from ``seed``, a libcuda that marks
    its directory, ``gpus`` device nodes (the library reports the GPUs whose nodes it sees), nvidia-smi.

    ``char_devices``: real character devices (major 195, as NVIDIA's kernel module numbers them) for a real
    node, whose runtime creates a container's device nodes from the host's; nothing opens them (there is
    no kernel module), the emulated library only looks. Plain files do on a simulated node."""
    if root.exists():
        shutil.rmtree(root)
    lib = nvml.build(profile, seed)
    (root / LIB_DIR).mkdir(parents=True)
    # As a driver installs them: the versioned files and the soname links (the toolkit finds libraries by version).
    for built, soname in ((lib.path, nvml.LIBRARY), (nvml.cuda_stub(), "libcuda.so.1")):
        versioned = f"{soname.rsplit('.so', 1)[0]}.so.{nvml.DRIVER_VERSION}"
        shutil.copy2(built, root / LIB_DIR / versioned)
        (root / LIB_DIR / soname).symlink_to(versioned)
    (root / "dev").mkdir()
    for minor, name in [*((m, f"nvidia{m}") for m in range(gpus)), (CTL_MINOR, "nvidiactl")]:
        path = root / "dev" / name
        if char_devices:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
            path.chmod(0o666)
        else:
            path.touch()
    (root / "usr" / "bin").mkdir(parents=True)
    (root / SMI_CALLS).parent.mkdir(parents=True)
    (root / "usr" / "bin" / "nvidia-smi").write_text(NVIDIA_SMI)
    (root / "usr" / "bin" / "nvidia-smi").chmod(0o755)
    return root


def entry(version: str, profile: str, root: Path) -> dict[str, str]:
    """What ``ClusterState.nvidia`` records of a node running NVIDIA's plugin ``version`` (built if missing)."""
    component = catalog.nvidia_driver(version)
    built = builder.build_all([component])[component.dirname]
    return {"version": version, "profile": profile, "root": str(root),
            "plugin": str(built.binary("gpu-kubelet-plugin")), "hook": str(built.binary("nvidia-cdi-hook"))}


def smi_calls(root: Path) -> list[str]:
    """The nvidia-smi settings the driver applied to this root's GPUs, in order (``SMI_CALLS``)."""
    path = root / SMI_CALLS
    return path.read_text().splitlines() if path.is_file() else []


def description(version: str, profile: str) -> str:
    """NVIDIA's driver on these GPUs as provenance names it: exactly what ran, never just "GPU"."""
    return f"NVIDIA DRA driver v{version} on emulated GPUs ({profile.upper()} profile, emulated NVML)"
