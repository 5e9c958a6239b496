"""The harness's allocation path against scheduler_perf's, on one machine in one invocation.

Three ratios, each the harness's pods/s over scheduler_perf's ``SchedulingThroughput``
average for the same workload, measured minutes apart on the same cores:

- ``burst``: upstream's exact work (its nodes, devices, pre-allocated claims and measured pods).
- ``half-full``: the same cluster with nothing pre-allocated and pods for three quarters of
  its devices created at once, so scheduling goes on past the point where half the devices
  are taken and the allocator's search gets longer.
- ``sustained``: pods that finish 2 s after they start, at a fixed rate; the highest rate of
  a descending ladder whose claims are allocated with p50 under 1 s.

scheduler_perf runs first and alone: the embedded cluster is started only after it ends.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dra_harness.bench import scheduler_perf
from dra_harness.bench.burst import burst
from dra_harness.bench.throughput import Throughput
from dra_harness.contention import bench as allocation_bench
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.waits import watch_until
from dra_harness.labels import run_selector

#: Fractions of scheduler_perf's rate tried, highest first, for the sustained rate.
LADDER = (1.0, 0.8, 0.65, 0.5, 0.4, 0.3)
#: A rate is sustained when the claims of pods finishing after HOLD_S are allocated with p50 under this.
SUSTAINED_P50_S = 1.0
HOLD_S = 2.0
#: Seconds of arrivals at each step of the ladder.
STEP_S = 20.0
#: How long a phase's namespace (its pods and claims) may take to go before the next phase starts.
SETTLE_S = 300.0


def settle(kube: Kube, run_id: str) -> None:
    """Until the namespaces of earlier phases are gone: their deletion (hundreds of pods and claims)
    would otherwise load the control plane during the next phase's measurement."""
    watch_until(kube, rest.NAMESPACES, lambda items: not items, SETTLE_S, "the previous phase's namespace to go",
                label_selector=run_selector(run_id))


def sustained(kube: Kube, run_id: str, version: str, nodes: int, devices_per_node: int, reference: float, out: Path,
              say: Callable[[str], None]) -> dict[str, Any]:
    """Walk the ladder down from ``reference`` pods/s; the first step that holds p50 < 1 s is the sustained rate."""
    steps = []
    for fraction in LADDER:
        settle(kube, run_id)
        rate = round(reference * fraction, 1)
        claims = max(20, int(rate * STEP_S))
        result = allocation_bench.allocation(kube, run_id, version, rate, nodes, devices_per_node, claims, HOLD_S,
                                             out / f"sustained-{rate:g}")
        p50 = result["allocation_latency_s"]["p50"]
        held = result["allocated"] == claims and p50 is not None and p50 < SUSTAINED_P50_S
        steps.append({"rate": rate, "achieved_rate": result["achieved_rate"], "p50_s": p50, "held": held})
        say(f"sustained {rate:g}/s: claim p50 {p50 if p50 is None else round(p50, 3)} s, "
            f"{result['allocated']}/{claims} allocated -> {'held' if held else 'not held'}")
        if held:
            return {"rate": result["achieved_rate"], "steps": steps}
    return {"rate": None, "steps": steps}


def ratios(reference: Throughput, burst_result: dict, half_full: dict, steady: dict) -> dict[str, float | None]:
    """Each harness rate over scheduler_perf's average (None where the harness produced no rate)."""
    avg = reference["Average"]

    def over(tp: Throughput | None) -> float | None:
        return tp["Average"] / avg if tp else None

    return {"burst": over(burst_result["scheduling_throughput"]), "half-full": over(half_full["scheduling_throughput"]),
            "sustained": steady["rate"] / avg if steady["rate"] else None}


def run_harness_side(kube: Kube, run_id: str, version: str, workload: str, reference: Throughput, out: Path,
                     say: Callable[[str], None]) -> dict[str, Any]:
    nodes, per_node, init, pods = scheduler_perf.WORK[workload]
    say(f"harness burst: {workload}'s work ({nodes} nodes x {per_node} devices, {init} pre-allocated, {pods} pods)")
    b = burst(kube, run_id, version, nodes, per_node, init, pods, out / "burst")
    fill = int(nodes * per_node * 0.75)
    say(f"harness half-full: {fill} pods at once into {nodes * per_node} free devices")
    settle(kube, run_id)
    h = burst(kube, run_id, version, nodes, per_node, 0, fill, out / "half-full")
    s = sustained(kube, run_id, version, nodes, per_node, reference["Average"], out, say)
    return {"burst": b, "half-full": h, "sustained": s, "ratios": ratios(reference, b, h, s)}
