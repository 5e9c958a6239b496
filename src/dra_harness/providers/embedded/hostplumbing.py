"""Host plumbing of real nodes: cgroup roots, mounts and links, created and removed by path or name.

Apart from ``realnode`` (which only names and configures things) because this is what
touches the host, and what ``down`` relies on to leave nothing behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from dra_harness.errors import ClusterError
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_fixed

MOUNTINFO = Path("/proc/self/mountinfo")


class HostError(ClusterError):
    """A host change (link, address) failed; says which command and why."""


# -- cgroups -------------------------------------------------------------------------
def hierarchies(mountinfo: str | None = None) -> list[Path]:
    """Every cgroup hierarchy the host mounts: v1 controllers, named v1 hierarchies (systemd) and
    cgroup2, which a hybrid host mounts at ``/sys/fs/cgroup/unified`` and where runc and the
    kubelet create a node's cgroups too, so teardown must look there as well."""
    text = MOUNTINFO.read_text() if mountinfo is None else mountinfo
    found = set()
    for line in text.splitlines():
        fields, _, after = line.partition(" - ")
        if after.split()[:1] in (["cgroup"], ["cgroup2"]):
            found.add(Path(_mount_point(fields)))
    return sorted(found)


def make_cgroup_root(path: str) -> None:
    """Create the node's cgroup root in every hierarchy (kubelet requires it in each v1 controller)."""
    for h in hierarchies():
        d = h / path.lstrip("/")
        d.mkdir(exist_ok=True)
        if h.name == "cpuset":  # a new cpuset has no cpus or mems until given its parent's
            for f in ("cpuset.cpus", "cpuset.mems"):
                if not (d / f).read_text().strip():
                    (d / f).write_text((h / f).read_text())


def _cgroup_dirs(path: str) -> list[Path]:
    """Every cgroup directory at or below ``path`` in every hierarchy, deepest first.

    containerd and the kubelet remove cgroups while we walk, so vanished entries are skipped.
    """
    found: list[Path] = []
    for h in hierarchies():
        root = h / path.lstrip("/")
        for dirpath, _, _ in os.walk(root, onerror=lambda e: None):
            found.append(Path(dirpath))
    return sorted(found, key=lambda p: -len(p.parts))


def cgroup_pids(path: str) -> set[int]:
    pids: set[int] = set()
    for d in _cgroup_dirs(path):
        try:
            pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
        except OSError:
            continue
    return pids


def remove_cgroup_root(path: str, timeout: float = 10) -> list[int]:
    """SIGKILL whatever still runs in the node's cgroups, then remove them; returns the pids killed."""
    killed = sorted(cgroup_pids(path))
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while cgroup_pids(path) and time.monotonic() < deadline:
        time.sleep(0.1)
    for d in _cgroup_dirs(path):
        _rmdir(d)
    return killed


def _rmdir(d: Path) -> None:
    """Remove a cgroup directory; the kernel refuses (EBUSY) until its last process is reaped,
    so it is retried for a second, then left (``down`` reports what is left)."""
    busy = retry_if_exception(lambda e: isinstance(e, OSError) and not isinstance(e, FileNotFoundError))
    try:
        for attempt in Retrying(stop=stop_after_attempt(20), wait=wait_fixed(0.05), retry=busy, reraise=True):
            with attempt:
                d.rmdir()
    except OSError:  # gone already, or still busy after the last try
        pass


# -- mounts and links ----------------------------------------------------------------
def mounts_under(prefix: Path) -> list[str]:
    """Mount points at or below ``prefix`` (from /proc/self/mountinfo), deepest first."""
    found = []
    needle = str(prefix).rstrip("/")
    for line in MOUNTINFO.read_text().splitlines():
        point = _mount_point(line)
        if point == needle or point.startswith(needle + "/"):
            found.append(point)
    return sorted(set(found), key=lambda p: -p.count("/"))


def _mount_point(line: str) -> str:
    # The fifth field of a mountinfo line, with the kernel's octal escapes (\040 for a space) undone.
    return line.split()[4].encode().decode("unicode_escape")


def unmount_all(prefix: Path) -> list[str]:
    """Lazily unmount everything below ``prefix`` (netns pins, rootfs, tmpfs, kubelet's bind)."""
    done = []
    for _ in range(5):  # a bind mount may hide others; repeat until nothing is left
        points = mounts_under(prefix)
        if not points:
            break
        for p in points:
            subprocess.run(["umount", "-l", p], capture_output=True)
            done.append(p)
    return done


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def add_host_link(name: str, ip: str) -> None:
    """Create the port-less bridge ``name`` holding ``ip``/32 (no dummy driver on every kernel)."""
    delete_link(name)
    for argv in (["ip", "link", "add", name, "type", "bridge"], ["ip", "addr", "add", f"{ip}/32", "dev", name],
                 ["ip", "link", "set", name, "up"]):
        out = subprocess.run(argv, capture_output=True, text=True)
        if out.returncode != 0:
            raise HostError(f"{' '.join(argv)} failed: {out.stderr.strip()}")


def delete_link(name: str) -> None:
    if link_exists(name):
        subprocess.run(["ip", "link", "delete", name], capture_output=True)
