"""Image contents from Debian packages, for a container that needs a C library and an interpreter.

Why: the NVML probe is Python loading NVIDIA's C library, which needs glibc in the container, and no
image registry is reachable here while the Debian archive is. ``apt-get download`` fetches the
packages of the machine's own Debian release (checked by apt against its signed lists), cached by
name and version; ``dpkg-deb -x`` unpacks them: what ``FROM debian`` and ``apt-get install`` would
give, without a registry and without running maintainer scripts.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from dra_harness.components import build as builder
from dra_harness.components.oci import File
from dra_harness.errors import BuildError


def _debs_dir() -> Path:
    path = builder.cache_root() / "debs"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def fetch(packages: list[str]) -> list[Path]:
    """The ``.deb`` of each package (downloaded once; a cached one of any version is reused)."""
    where = _debs_dir()
    found = {p: sorted(where.glob(f"{p}_*.deb")) for p in packages}
    missing = [p for p, debs in found.items() if not debs]
    if missing:
        if not shutil.which("apt-get"):
            raise BuildError(f"cannot download Debian packages {', '.join(missing)}: apt-get is not on PATH")
        with tempfile.TemporaryDirectory(prefix="debs-", dir=where) as tmp:
            out = subprocess.run(["apt-get", "download", *missing], cwd=tmp, capture_output=True, text=True)
            if out.returncode != 0:
                tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
                raise BuildError(f"apt-get download {' '.join(missing)} failed: {tail[0]}")
            for deb in Path(tmp).glob("*.deb"):
                deb.replace(where / deb.name)
        found = {p: sorted(where.glob(f"{p}_*.deb")) for p in packages}
    return [debs[-1] for debs in found.values() if debs]


def unpack(debs: list[Path], root: Path) -> None:
    for deb in debs:
        out = subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], capture_output=True, text=True)
        if out.returncode != 0:
            raise BuildError(f"dpkg-deb -x {deb.name} failed: {out.stderr.strip()}")


def files(root: Path, keep: Callable[[str], bool]) -> list[File]:
    """Regular files and symlinks under ``root`` whose path (relative, no leading slash) ``keep`` accepts."""
    out = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            full = Path(dirpath, name)
            rel = full.relative_to(root).as_posix()
            if not keep(rel):
                continue
            info = full.lstat()
            if stat.S_ISLNK(info.st_mode):
                out.append(File(rel, link=os.readlink(full)))
            elif stat.S_ISREG(info.st_mode):
                out.append(File(rel, full.read_bytes(), mode=stat.S_IMODE(info.st_mode)))
    return out


def image_files(packages: list[str], keep: Callable[[str], bool]) -> list[File]:
    """The kept files of ``packages`` unpacked together."""
    debs = fetch(packages)
    with tempfile.TemporaryDirectory(prefix="rootfs-") as tmp:
        unpack(debs, Path(tmp))
        return files(Path(tmp), keep)
