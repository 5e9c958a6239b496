"""Debian packages the harness needs beyond Python and Go (runc, CNI plugins, chromium...).

Why a module of its own: CI runs on a fresh machine, where nothing installed by an
earlier session survives, so the harness installs what it needs itself when it runs
as root, and otherwise says in one line what is missing and how to get it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable

from dra_harness.errors import ClusterError

_updated = False


class PrereqError(ClusterError):
    """A prerequisite is missing and cannot be installed here (one line, for the CLI)."""


def missing(packages: Iterable[str]) -> list[str]:
    """The packages of ``packages`` that dpkg does not report as installed."""
    out = []
    for pkg in packages:
        proc = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True
        )
        if proc.returncode != 0 or "install ok installed" not in proc.stdout:
            out.append(pkg)
    return out


def can_install() -> bool:
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


def ensure(packages: Iterable[str], why: str) -> None:
    """Install the missing ones with apt-get when root; otherwise raise a one-line PrereqError."""
    global _updated
    need = missing(packages)
    if not need:
        return
    if not can_install():
        raise PrereqError(f"{why} needs Debian packages {' '.join(need)}: run `apt-get install {' '.join(need)}` as root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if not _updated:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, text=True)
        _updated = True
    proc = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *need],
        env=env, capture_output=True, text=True,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise PrereqError(f"{why}: apt-get install {' '.join(need)} failed: {tail[0]}")
