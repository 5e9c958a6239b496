"""Real-node figures: how long a real node takes to become Ready, and how long a pod with a
claim takes to start on it (scheduled, prepared by the driver, container running).

Printed, never asserted: they depend on the machine (figures in docs/figures.md come from here).
"""

from __future__ import annotations

import os
import statistics
import time

from rich.console import Console
from rich.table import Table

from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.checks.incontainer import probe_pod, read_env
from dra_harness.kube import builders, rest
from dra_harness.kube.pods import wait_running
from dra_harness.providers import open_cluster
from dra_harness.providers.localstate import ClusterSpec
from dra_harness.providers.profiles import EXAMPLE_DRIVER as DRIVER_NAME
from dra_harness.components.images import WORKLOAD_IMAGE

NODE = "real-node-0"


def real_node_bench(runs: int, pods: int, k8s_version: str, console: Console) -> None:
    builder.build_all(catalog.for_cluster(k8s_version, real_nodes=True))
    rows: dict[str, list[float]] = {}
    for i in range(runs):
        c = open_cluster(f"bench-real-{os.getpid()}-{i}")
        st = c.up(ClusterSpec(name=c.name, nodes=1, gpus_per_node=8, k8s_version=k8s_version, real_nodes=1), timeout=240)
        try:
            rows.setdefault("containerd", []).append(st.timings[f"{NODE}_containerd_ready"])
            rows.setdefault("ready", []).append(st.timings[f"{NODE}_ready_after_kubelet_start"])
            rows.setdefault("up", []).append(st.timings["up"])
            kube = c.kube()
            ns = "bench"
            kube.create(rest.NAMESPACES, {"metadata": {"name": ns}})
            kube.create(rest.RESOURCE_CLAIM_TEMPLATES, builders.claim_template("one", "bench", [builders.exactly("gpu", DRIVER_NAME)]), ns)
            for j in range(pods):
                t = time.monotonic()
                kube.create(rest.PODS, probe_pod(f"p{j}", "bench", WORKLOAD_IMAGE, NODE, {"gpu": {"template": "one"}}), ns)
                wait_running(kube, ns, f"p{j}", timeout=120)
                rows.setdefault("running", []).append(time.monotonic() - t)
                read_env(kube, ns, f"p{j}", "ctr0")
                rows.setdefault("env", []).append(time.monotonic() - t)
                kube.delete(rest.PODS, f"p{j}", ns, grace_seconds=0)
        finally:
            t = time.monotonic()
            c.down()
            rows.setdefault("down", []).append(time.monotonic() - t)
        console.print(f"run {i + 1}/{runs}: real node Ready {rows['ready'][-1]:.1f}s after kubelet start, "
                      f"pod Running {statistics.median(rows['running'][-pods:]):.2f}s (median of {pods})")
    table = Table(title=f"real node (containerd v{catalog.CONTAINERD_VERSION}, kubelet v{k8s_version}), {runs} runs (median / max)")
    for col in ("figure", "median", "max"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    for key, label in [
        ("containerd", "containerd serving + 3 images imported"),
        ("ready", "node Ready after kubelet start"),
        ("up", "`cluster up` with 1 real + 1 KWOK node"),
        ("running", "pod with a template claim: create -> Running"),
        ("env", "pod with a template claim: create -> GPU_DEVICE_* read from its log"),
        ("down", "`cluster down` (real node, containers killed, mounts removed)"),
    ]:
        table.add_row(label, f"{statistics.median(rows[key]):.2f} s", f"{max(rows[key]):.2f} s")
    console.print(table)
