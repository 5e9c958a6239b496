"""Ports for the processes an embedded cluster starts, reserved until they bind them.

Why not ``bind(("127.0.0.1", 0))``: the kernel hands that out of ``ip_local_port_range``, the range it
also draws the local end of every outgoing connection from. A port found free, closed, and bound by
its process seconds later can meanwhile be the local end of some client's connection, or another
run's pick (CI saw kwok exit with "bind: address already in use" while two workers started clusters).

So ports come at random from below that range, where only listeners live, and each one taken is
reserved by a file under the cache (chosen under one lock, so two runs at once never take the same
port) until its process has had time to bind it; after :data:`RESERVED_S` a reservation lapses and
the bind test alone keeps a bound port from being taken again.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import time
from pathlib import Path

from dra_harness.components import build as builder
from dra_harness.errors import ClusterError

#: Lowest port handed out: below it live well-known services a machine may start later.
FLOOR = 10000
#: How long a reservation holds: a cluster's processes bind their ports within its start-up.
RESERVED_S = 600.0
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range(path: Path = _RANGE_FILE) -> tuple[int, int]:
    """The kernel's range for the local ends of connections (Linux's default where it cannot be read)."""
    try:
        low, high = (int(x) for x in path.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def candidates(ephemeral: tuple[int, int]) -> range:
    """Ports a listener may take without meeting a connection's local end: below the ephemeral range,
    else above it (a machine whose range starts low)."""
    low, high = ephemeral
    if low - FLOOR >= 1000:
        return range(FLOOR, low)
    if 65535 - high >= 1000:
        return range(high + 1, 65536)
    raise ClusterError(f"no ports outside the ephemeral range {low}-{high} "
                       f"({_RANGE_FILE}) for the cluster's listeners")


def bindable(port: int) -> bool:
    """Nothing listens on ``port`` on any address (a listener on the node IP counts too)."""
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _registry() -> Path:
    path = builder.cache_root() / "ports"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def take(names: list[str], rng: random.Random | None = None) -> dict[str, int]:
    """One distinct port per name, free now and reserved for :data:`RESERVED_S` seconds."""
    rng = rng or random.SystemRandom()
    pool = candidates(ephemeral_range())
    registry = _registry()
    with open(registry / ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        now = time.time()
        reserved = set()
        for f in registry.iterdir():
            if not f.name.isdigit():
                continue
            try:
                if now - f.stat().st_mtime > RESERVED_S:
                    f.unlink()
                else:
                    reserved.add(int(f.name))
            except FileNotFoundError:
                pass
        ports: dict[str, int] = {}
        for name in names:
            for _ in range(200):
                port = rng.choice(pool)
                if port not in reserved and port not in ports.values() and bindable(port):
                    break
            else:
                raise ClusterError(f"no free port for {name} in {pool.start}-{pool.stop - 1} after 200 tries")
            ports[name] = port
            (registry / str(port)).write_text(f"{os.getpid()} {name}\n")
        return ports
