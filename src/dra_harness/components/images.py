"""The images a real node runs, built locally: no registry, no Docker.

* the pause image (sandbox, and the image the suites' pods use): a tiny static Go
  binary that waits for SIGTERM/SIGINT;
* a workload image: Debian's static busybox, so probe pods can ``env`` and ``sleep``;
* the example driver's image: the Go-built kubelet plugin, for the DaemonSet install;
* KWOK's image: its Go-built binary and the harness's pod stages, for simulated nodes run by a
  KWOK Deployment inside a cluster the run did not create;
* the NVML probe's image: Debian's Python and glibc (:mod:`dra_harness.components.debian`) with the
  nvidia-ml-py the harness itself uses, for the GPU-visibility checks on emulated GPUs.

Each is written once per content as an OCI tarball under the cache and imported
into a node's containerd with ``ctr images import``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from dra_harness import data
from dra_harness.components import build as builder
from dra_harness.components import catalog, debian
from dra_harness.components.gomod import go
from dra_harness.kube.rules import PAUSE_IMAGE
from dra_harness.components.oci import File, Image, write_layout

WORKLOAD_IMAGE = "dra-harness.local/busybox:1"
#: A public image with a shell, for container-level checks where the cluster offers none of its own.
PUBLIC_PROBE_IMAGE = "docker.io/library/busybox:1.36"
NVML_PROBE_IMAGE = "dra-harness.local/nvml-probe"
DRIVER_IMAGE = f"dra-harness.local/dra-example-driver:v{catalog.EXAMPLE_DRIVER_VERSION}"
BUSYBOX = Path("/usr/bin/busybox")  # Debian busybox-static
_APPLETS = ("sh", "env", "sleep", "cat", "ls", "echo", "true", "printenv", "grep")

_PAUSE_GO = """package main

import (
\t"os"
\t"os/signal"
\t"syscall"
)

// Wait until told to stop; PID 1 ignores default-action signals, so catch them.
func main() {
\tc := make(chan os.Signal, 1)
\tsignal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
\t<-c
}
"""


def _images_dir() -> Path:
    return builder.cache_root() / "images"


def pause_binary() -> Path:
    """Build (once per Go version) the static pause binary."""
    target = builder.cache_root() / "bin" / "pause" / builder.go_version() / "pause"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pause-") as tmp:
        Path(tmp, "go.mod").write_text("module pause\n\ngo 1.24\n")
        Path(tmp, "main.go").write_text(_PAUSE_GO)
        out = Path(tmp, "pause")
        go("build", "-trimpath", "-ldflags=-s -w", "-o", str(out), ".", cwd=Path(tmp))
        staged = target.with_name(f"pause.{os.getpid()}.tmp")  # two test workers may build it at once
        shutil.copy2(out, staged)
        staged.replace(target)
    return target


def pause_image() -> Image:
    return Image(PAUSE_IMAGE, [File("pause", pause_binary().read_bytes())], entrypoint=["/pause"])


def workload_image() -> Image:
    files = [File("bin/busybox", BUSYBOX.read_bytes())]
    files += [File(f"bin/{a}", link="busybox") for a in _APPLETS]
    # Upstream's demos run ``bash -c "export; trap ...; sleep 9999 & wait"`` in ubuntu:22.04, which no node here
    # can pull; busybox's sh does all of that, so ``bash`` hands its arguments to it.
    files.append(File("bin/bash", b'#!/bin/sh\nexec sh "$@"\n'))
    return Image(WORKLOAD_IMAGE, files, entrypoint=[], cmd=["sh"])


def driver_image(plugin: Path, version: str = catalog.EXAMPLE_DRIVER_VERSION) -> Image:
    """The plugin binary of example-driver release ``version`` as an image tagged with that release."""
    binary = File("usr/bin/dra-example-kubeletplugin", plugin.read_bytes())
    return Image(DRIVER_IMAGE.rsplit(":", 1)[0] + f":v{version}", [binary], entrypoint=["/usr/bin/dra-example-kubeletplugin"])


KWOK_IMAGE = f"dra-harness.local/kwok:v{catalog.KWOK.version}"
#: Where the shipped stages are in KWOK's image. A run's KWOK does not read them: it gets stages limited
#: to the run's pods from a ConfigMap (:mod:`dra_harness.providers.incluster_kwok`); they are a KWOK's default.
KWOK_STAGES = "/etc/kwok/stages.yaml"


def kwok_image() -> Image:
    """KWOK built from its module, with the stages the embedded cluster's KWOK uses."""
    binary = builder.build_all([catalog.KWOK], quiet=True)[catalog.KWOK.dirname].binary("kwok")
    stages = data.path("kwok-stages.yaml").read_bytes()
    files = [File("usr/bin/kwok", binary.read_bytes()), File(KWOK_STAGES.lstrip("/"), stages, mode=0o644)]
    return Image(KWOK_IMAGE, files, entrypoint=["/usr/bin/kwok"])


#: Debian packages of the probe image: Python, the libraries its interpreter and ctypes link, and glibc
#: (NVML is a C library: a container loading it needs one, as on a GPU node).
NVML_PROBE_PACKAGES = ["libc6", "python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "libffi8",
                       "zlib1g", "libexpat1"]
#: Parts of the packages nothing in a probe reads: documentation, Python's own tests and GUI tools.
_PROBE_DROPPED = ("usr/share/", "usr/lib/python3.11/test/", "usr/lib/python3.11/idlelib/", "usr/lib/python3.11/tkinter/",
                  "usr/lib/python3.11/ensurepip/", "usr/lib/python3.11/lib2to3/", "usr/lib/python3.11/pydoc_data/",
                  "usr/lib/python3.11/turtledemo/")


def nvml_probe_image_name() -> str:
    return f"{NVML_PROBE_IMAGE}:py3.11-nvml{importlib.metadata.version('nvidia-ml-py')}"


def nvml_probe_image() -> Image:
    """Python with nvidia-ml-py on glibc: what ``--probe-image`` asks of a GPU cluster's image."""
    pynvml = Path(importlib.util.find_spec("pynvml").origin)  # type: ignore[union-attr,arg-type]
    files = debian.image_files(NVML_PROBE_PACKAGES, lambda rel: not rel.startswith(_PROBE_DROPPED))
    files += [File("usr/bin/python3", link="python3.11"), File("usr/lib/python3/dist-packages/pynvml.py", pynvml.read_bytes(), mode=0o644),
              File("bin/busybox", BUSYBOX.read_bytes()), File("bin/sh", link="busybox"),
              File("etc/ld.so.conf", b"include /etc/ld.so.conf.d/*.conf\n", mode=0o644)]
    return Image(nvml_probe_image_name(), files, entrypoint=[], cmd=["python3"])


def tarballs(plugin: Path, driver_version: str = catalog.EXAMPLE_DRIVER_VERSION) -> list[Path]:
    """Write (or reuse) every real-node image as an OCI tarball; returns their paths."""
    return [tarball(image) for image in (pause_image(), workload_image(), driver_image(plugin, driver_version))]


def tarball(image: Image) -> Path:
    """``image`` as an OCI tarball in the image cache (written once per name)."""
    name = image.name.replace("/", "_").replace(":", "_")
    return write_layout(image, _images_dir() / f"{name}.tar")
