"""Benchmarks that print figures (never asserted in tests): cluster start/stop, memory, builds.

Figures vary with the machine; each run prints what it measured and how, so that a
closing note or a regression report can quote it with the command that reproduces it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.providers import open_cluster
from dra_harness.providers.localstate import ClusterSpec


def _kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cluster_bench(runs: int, nodes: int, gpus: int, k8s_version: str, console: Console) -> None:
    builder.build_all(catalog.for_cluster(k8s_version))
    rows = []
    for i in range(runs):
        c = open_cluster(f"bench-{os.getpid()}-{i}")
        st = c.up(ClusterSpec(name=c.name, nodes=nodes, gpus_per_node=gpus, k8s_version=k8s_version))
        time.sleep(2)  # let start-up allocations settle before reading memory
        pids = c.pids()
        rss = sum(_kib(p, "VmRSS") for p in pids) / 1024
        hwm = sum(_kib(p, "VmHWM") for p in pids) / 1024
        t = time.monotonic()
        c.down()
        rows.append({**st.timings, "down": time.monotonic() - t, "rss_mib": rss, "peak_mib": hwm, "procs": len(pids)})
        console.print(f"run {i + 1}/{runs}: up {st.timings['up']:.1f}s, down {rows[-1]['down']:.1f}s, RSS {rss:.0f} MiB")
    table = Table(title=f"embedded cluster, Kubernetes v{k8s_version}, {nodes} nodes x {gpus} devices, {runs} runs (median / max)")
    table.add_column("figure")
    table.add_column("median", justify="right")
    table.add_column("max", justify="right")
    for key, label, unit in [
        ("apiserver_serving", "kube-apiserver serving (the other components start)", "s"),
        ("apiserver_ready", "kube-apiserver ready (RBAC bootstrapped)", "s"),
        ("nodes_ready", "all nodes Ready and untainted", "s"),
        ("slices_ready", "all slices hold every device", "s"),
        ("up", "`cluster up` returns", "s"),
        ("down", "`cluster down`", "s"),
        ("rss_mib", "RSS of all processes after up", "MiB"),
        ("peak_mib", "sum of per-process peak RSS", "MiB"),
    ]:
        values = [r[key] for r in rows]
        table.add_row(label, f"{statistics.median(values):.1f} {unit}", f"{max(values):.1f} {unit}")
    console.print(table)


def cold_build_bench(k8s_version: str, console: Console) -> None:
    """Build everything with empty Go caches and an empty binary cache (the CI cold path)."""
    with tempfile.TemporaryDirectory(prefix="dra-cold-") as tmp:
        env = {
            **os.environ,
            "DRA_HARNESS_CACHE": f"{tmp}/cache",
            "GOCACHE": f"{tmp}/gocache",
            "GOMODCACHE": f"{tmp}/gomodcache",
        }
        started = time.monotonic()
        code = subprocess.call(
            [sys.executable, "-m", "dra_harness.cli", "components", "build", "--k8s-version", k8s_version], env=env
        )
        took = time.monotonic() - started
        du = subprocess.run(["du", "-sh", tmp], capture_output=True, text=True).stdout.split()[0]
        subprocess.call(["chmod", "-R", "u+w", tmp])  # the module cache is read-only
    console.print(f"cold build (empty GOCACHE, GOMODCACHE and binary cache): {took:.0f}s, exit {code}, {du} of caches")
