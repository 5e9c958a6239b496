"""Whether this host can run a real kubelet node, asked before any provider starts one.

The CLI (``run``, ``upgrade``) decides how many real nodes to ask for before it builds a cluster, so
the answer cannot live inside the embedded provider without every command reaching into it. What a
real node needs from the host: root, a few Debian packages, a cgroup hierarchy.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from dra_harness.components import prereqs
from dra_harness.errors import InputError

#: Debian packages a real node needs (runc, CNI plugins, busybox for the workload image).
PACKAGES = ["runc", "containernetworking-plugins", "busybox-static", "iproute2"]
CGROUP_V1 = Path("/sys/fs/cgroup")


def unavailable_reason() -> str | None:
    """Why real nodes cannot run on this host (one line), or None when they can."""
    if os.geteuid() != 0:
        return "real nodes need root (containerd, runc, network namespaces, mounts)"
    try:
        prereqs.ensure(PACKAGES, "real nodes")
    except prereqs.PrereqError as e:
        return str(e)
    if not (CGROUP_V1 / "memory").is_dir() and not (CGROUP_V1 / "cgroup.controllers").exists():
        return "no cgroup hierarchy mounted at /sys/fs/cgroup"
    return None


def choose_real_nodes(asked: int | None, say: Callable[[str], object]) -> int:
    """``asked`` when given (an error if impossible); otherwise 1 where possible, else 0 with the reason."""
    reason = unavailable_reason() if asked != 0 else None
    if asked is None:
        if reason:
            say(f"no real nodes: {reason}")
            return 0
        return 1
    if reason:
        raise RealNodeUnavailable(f"--real-nodes {asked}: {reason}")
    return asked


class RealNodeUnavailable(InputError):
    """Real nodes were asked for where they cannot run (one line for the CLI)."""
