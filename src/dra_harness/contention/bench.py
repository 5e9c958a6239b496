"""Allocation latency under churn: ResourceClaim created -> allocated, at a steady create rate.

Comparable to clusterloader2's ResourceClaimAllocationLatency: pods with a claim
template arrive at ``rate`` per second (created by locust), the resourceclaim controller
creates each claim, kube-scheduler allocates it, the pod completes after ``hold``
seconds and its device returns. Both ends are stamped when the watch delivers them, so
the figure includes the watch delay (as clusterloader2's does). Devices are never the
bottleneck unless ``rate x hold`` nears the device count (the JSON says so).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dra_harness.kube.rest import Kube
from dra_harness.contention import metrics, plots
from dra_harness.contention.recorder import Recorder
from dra_harness.contention.runner import drop_namespace, run_namespace, send_arrivals
from dra_harness.contention.scenario import Scenario, parse
from dra_harness.contention.topology import Topology


def bench_scenario(name: str, nodes: int, devices_per_node: int, pods: int, interval: float, hold: float) -> Scenario:
    """One tier of one-device pods arriving every ``interval`` s and holding their device ``hold`` s, design ``shared``."""
    return parse({
        "name": name, "time_compression": 1,
        "cluster": {"nodes": nodes, "devices_per_node": devices_per_node},
        "tiers": [{"name": "bench", "priority": 0, "devices_per_job": 1, "tolerable_wait": 60,
                   "arrival": {"process": "fixed", "count": pods, "interval": interval},
                   "duration": {"distribution": "fixed", "value": hold}}],
        "designs": {"shared": {}},
    }, name)


def take_down(kube: Kube, topo: Topology, rec: Recorder, namespace: str) -> None:
    """Stop recording, free the devices and let the namespace go, remove the classes, nodes and slices."""
    rec.close()
    if namespace:
        drop_namespace(kube, namespace)
    topo.uninstall("shared")
    topo.delete()


@contextmanager
def recorded(kube: Kube, topo: Topology, what: str, create_timeout: float = 120.0,
             prepare: Callable[[str], None] | None = None) -> Iterator[tuple[str, Recorder]]:
    """A bench's stage: ``topo``'s simulated nodes, a namespace with the shared design installed (then
    ``prepare(namespace)``, before any watch starts), and a started recorder of it; all taken down
    (:func:`take_down`) however the block ends. The recorder keeps what it saw after the block."""
    rec = Recorder(kube, "")
    ns = ""
    try:
        topo.create(timeout=create_timeout)
        ns = run_namespace(kube, topo, what)
        topo.install("shared", ns)
        if prepare:
            prepare(ns)
        rec = Recorder(kube, ns)
        rec.start()
        yield ns, rec
    finally:
        take_down(kube, topo, rec, ns)


def allocation(kube: Kube, run_id: str, k8s_version: str, rate: float, nodes: int, devices_per_node: int,
               claims: int, hold: float, out: Path, progress: Callable[[int], None] | None = None) -> dict:
    topo = Topology(kube, bench_scenario("bench-allocation", nodes, devices_per_node, claims, 1.0 / rate, hold), run_id)
    started = time.monotonic()
    with recorded(kube, topo, "bench") as (ns, rec):
        arrivals: list[dict[str, Any]] = [{"name": f"b-{i}", "tier": "bench", "at": i / rate,
                     "body": topo.pod("shared", f"b-{i}", "bench", hold)} for i in range(claims)]
        t0 = time.time() + 2.0
        sent = send_arrivals(kube, ns, arrivals, t0, timeout=claims / rate + 60)
        stats = sent.pop()["locust"] if sent and "locust" in sent[-1] else {}
        rec.wait_settled({a["name"] for a in arrivals}, time.monotonic() + hold + 120,
                         progress=(lambda d: progress(d)) if progress else None)
    with rec.lock:
        lat = [rec.claim_allocated[c] - rec.claim_seen[c] for c in rec.claim_allocated if c in rec.claim_seen]
        sends = sorted(s["sent"] for s in sent)
        pod_to_claim = [rec.claim_seen[c] - created for c, h in
                        ((h.claim, h) for h in rec.all_holds()) if h.pod in rec.jobs and (created := rec.jobs[h.pod].created)]
    pct = lambda v: {k: metrics.percentile(v, q) for k, q in (("p50", 50), ("p95", 95), ("p99", 99))} | {"max": max(v) if v else None}  # noqa: E731
    result: dict[str, Any] = {
        "bench": "allocation", "k8s_version": k8s_version, "rate": rate, "nodes": nodes,
        "devices": nodes * devices_per_node, "claims": claims, "hold_s": hold, "allocated": len(lat),
        "achieved_rate": (len(sends) - 1) / (sends[-1] - sends[0]) if len(sends) > 1 else 0.0,
        "devices_in_use_expected": round(rate * hold, 1),
        "allocation_latency_s": pct(lat), "pod_created_to_claim_created_s": pct(pod_to_claim),
        "wall_s": round(time.monotonic() - started, 1), "loadgen": stats,
        "plot": f"allocation-{rate:g}per-s-{nodes}nodes.png",
    }
    out.mkdir(parents=True, exist_ok=True)
    plots.wait_cdf(out / result["plot"], f"claim created -> allocated, {rate:g}/s, {nodes} nodes (k8s {k8s_version})",
                   {"claims": lat}, None, unit=0.001, xlabel="claim created -> allocated (ms, as watched)")
    (out / f"allocation-{rate:g}per-s-{nodes}nodes.json").write_text(json.dumps(result | {"latencies_s": lat}, indent=1))
    return result
