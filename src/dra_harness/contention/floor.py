"""The control plane's own floor: how long an uncontended job waits, so no verdict rests on that alone.

Why: a scenario runs compressed (1 h of work in 12 s), and the control plane's latency is
compressed with nothing: at 300x, one second of scheduling reads as five scenario minutes. A
tier whose tolerable wait is within a few floors of that latency is judged by this machine's
speed, not by the design. So each run first measures the floor (jobs created one at a time on
idle devices, created -> Running as the run's waits are measured), and a tier whose tolerable
wait is within :data:`FACTOR` floors gets "not established at this compression" instead of a
verdict. The floor of an idle control plane understates a loaded one (the scheduler's retries),
so ``contention run --check-compression`` also runs the scenario at half the compression and
fails when an established verdict flips: a verdict about the machine halves with it.

The queue design's jobs pass through Kueue before the scheduler sees them, so its floor is
measured through Kueue too (a Job admitted, its pod created and Running).

The floor also chooses the compression a suite runs at (:func:`compression`): the shortest
tolerable wait is kept :data:`MARGIN` floors above it, twice :data:`FACTOR`, since a loaded
control plane answers slower than the idle one measured here.
"""

from __future__ import annotations

import math
import time

from dra_harness.contention import queue
from dra_harness.contention.metrics import percentile
from dra_harness.contention.recorder import JOB_NAME_LABEL
from dra_harness.contention.runner import drop_namespace, run_namespace
from dra_harness.contention.scenario import Scenario
from dra_harness.contention.topology import Topology
from dra_harness.kube import events, kueue_api, rest
from dra_harness.kube.pods import wait_running
from dra_harness.kube.rest import Kube
from dra_harness.kube.waits import watch_until

#: A tolerable wait within this many floors is not established (the issue's 10x).
FACTOR = 10.0
#: The shortest tolerable wait a chosen compression leaves: this many floors (p95).
MARGIN = 20.0
SAMPLES = 20


def measure(kube: Kube, topo: Topology, samples: int = SAMPLES, timeout: float = 60.0, design: str = "shared",
            quota_waits: list[str] | None = None) -> list[float]:
    """Create ``samples`` one-device jobs one after another on idle devices (the shared design, or
    ``queue``: Jobs through Kueue); return each one's created -> Running in wall seconds (:func:`summarise`
    turns them into the floor at a compression). Through Kueue, ``quota_waits`` gets the floor Workloads Kueue
    said it could not admit at once: each is a wait for quota, which no floor should hold."""
    sc = topo.scenario
    tier = min(sc.tiers, key=lambda t: t.devices_per_job)
    ns = run_namespace(kube, topo, "floor")
    walls: list[float] = []
    try:
        topo.install(design, ns)
        if design == "queue":
            queue.install(kube, topo, ns)
        for i in range(samples):
            name = f"floor-{i}"
            started = time.time()
            if design == "queue":
                kube.create(rest.JOBS, queue.job(topo, name, tier.name, 3600.0), ns)
                watch_until(kube, rest.PODS, lambda pods: any(p["status"].get("phase") == "Running" for p in pods), timeout,
                            f"the pod of floor job {ns}/{name} Running", namespace=ns,
                            label_selector=f"{JOB_NAME_LABEL}={name}")
                walls.append(time.time() - started)
                kube.delete(rest.JOBS, name, ns, propagation="Foreground")
                watch_until(kube, rest.PODS, lambda pods: not pods, timeout, f"the pod of floor job {ns}/{name} gone",
                            namespace=ns, label_selector=f"{JOB_NAME_LABEL}={name}", environment=False)
                # Idle means Kueue's quota too: until its Workload is gone the next job would wait for the quota
                # to come back, and that wait, not the control plane's, would be measured.
                watch_until(kube, kueue_api.WORKLOADS, lambda workloads: not workloads, timeout,
                            f"the Workload of floor job {ns}/{name} gone", namespace=ns)
                continue
            kube.create(rest.PODS, topo.pod(design, name, tier.name, None), ns)
            wait_running(kube, ns, name, timeout)
            walls.append(time.time() - started)
            kube.delete(rest.PODS, name, ns, grace_seconds=0)
        if design == "queue" and quota_waits is not None:
            pending = events.events_in(kube, ns, "type=Warning,reason=Pending,involvedObject.kind=Workload")
            quota_waits += sorted({e["involvedObject"]["name"] for e in pending})
    finally:
        drop_namespace(kube, ns)
        topo.uninstall(design)
        if design == "queue":
            queue.uninstall(kube, topo, ns)
    return walls


def kind(design: str) -> str:
    """Which floor a design's waits stand on: Jobs through Kueue (``queue``), or pods straight to the scheduler."""
    return "queue" if design == "queue" else "shared"


def summarise(walls: list[float], compression: float, design: str = "shared", quota_waits: int | None = None) -> dict:
    """The floor at ``compression``: wall-second percentiles, p95 in scenario seconds, and the tolerable
    wait a verdict needs to exceed (``established_above_s``, scenario seconds); through Kueue, how many of
    its jobs waited for quota (:func:`measure`)."""
    p95 = percentile(walls, 95) or 0.0
    out = {
        "samples": len(walls), "measure": "one job at a time on idle devices, created -> Running"
                                          + (" (Jobs through Kueue)" if design == "queue" else ""),
        "wall_s": {"p50": round(percentile(walls, 50) or 0.0, 3), "p95": round(p95, 3), "max": round(max(walls, default=0.0), 3)},
        "p95_s": round(p95 * compression, 1), "time_compression": compression, "factor": FACTOR,
        "established_above_s": round(p95 * compression * FACTOR, 1),
    }
    if quota_waits is not None:
        out["quota_waits"] = quota_waits
    return out


def compression(walls: list[float], sc: Scenario, most: float) -> float:
    """The compression at which ``sc``'s shortest tolerable wait is :data:`MARGIN` floors (p95 of
    ``walls``), at most ``most``; rounded down, since rounding up would put it a hair under the margin."""
    p95 = percentile(walls, 95) or 0.0
    shortest = min(t.tolerable_wait_s for t in sc.tiers)
    chosen = most if p95 <= 0 else min(most, shortest / (MARGIN * p95))
    return math.floor(chosen * 100) / 100
