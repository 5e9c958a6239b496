"""Private small clusters started one test ahead, so a test does not wait for its own cluster's start.

About 85 integration tests each use a private 2-node x 2-device cluster (``small_cluster``): they stop
drivers, restart the API server, plant faults, so none can share one. Bringing each up takes 4-8 s
and taking it down 2 s, most of it waiting on processes, not CPU; in series that was about ten
minutes of CI. So each test worker keeps one spare cluster starting in a subprocess while a test
runs: the next test takes it (up by then), and the used one goes down in a thread beside the next
test. A spare is a fresh cluster like any other, owned by the worker (its watchdog removes it if
the worker dies). Run as ``python -m tests.integration.spares NAME OWNER_PID`` to start one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

from dra_harness.providers.embedded.cluster import ClusterSpec, LocalCluster

ROOT = Path(__file__).resolve().parents[2]
NODES, GPUS = 2, 2
UP_TIMEOUT_S = 300


def spec(name: str, owner: int) -> ClusterSpec:
    return ClusterSpec(name=name, nodes=NODES, gpus_per_node=GPUS, owner_pid=owner)


class Spares:
    """A worker's spare: at most one cluster starting, and the used ones going down."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.proc: subprocess.Popen | None = None
        self.name: str | None = None
        self.downs: list[threading.Thread] = []

    def start(self) -> None:
        self.name = f"it-spare-{uuid.uuid4().hex[:8]}"
        log = (self.log_dir / f"{self.name}.log").open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.integration.spares", self.name, str(os.getpid())],
                                     cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def take(self) -> LocalCluster:
        """The spare, up (started now when there is none, or when it failed: the test sees that start's error)."""
        proc, name = self.proc, self.name
        self.proc = self.name = None
        if proc is not None and name is not None:
            try:
                code = proc.wait(timeout=UP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                code = -1
            if code == 0:
                return LocalCluster(name)
            LocalCluster(name).down()  # a spare that failed to start: start one here, where its error shows
        name = f"it-{uuid.uuid4().hex[:8]}"
        cluster = LocalCluster(name)
        cluster.up(spec(name, os.getpid()))
        return cluster

    def give_back(self, cluster: LocalCluster) -> None:
        """Take ``cluster`` down beside the next test."""
        t = threading.Thread(target=cluster.down, name=f"down {cluster.name}", daemon=True)
        t.start()
        self.downs.append(t)
        self.downs = [d for d in self.downs if d.is_alive()]

    def close(self) -> None:
        if self.proc is not None and self.name is not None:
            self.proc.kill()
            self.proc.wait()
            LocalCluster(self.name).down()
        for t in self.downs:
            t.join(timeout=120)


if __name__ == "__main__":
    name, owner = sys.argv[1], int(sys.argv[2])
    LocalCluster(name).up(spec(name, owner), timeout=UP_TIMEOUT_S - 30)
