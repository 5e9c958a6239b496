"""scheduler_perf's DRA workload, driven by the harness on the embedded cluster.

The same work as upstream's ``SchedulingWithResourceClaimTemplate`` workloads: ``nodes``
simulated nodes with ``devices_per_node`` devices each, ``init_claims`` claims already
allocated (their status written directly, as upstream's ``allocResourceClaims`` does, so
half the devices are taken before the clock starts), then ``pods`` pods from one claim
template created at once. The difference is everything upstream leaves out: the
controller-manager's resourceclaim controller makes each claim, KWOK runs the nodes, pods
are created over HTTP by locust, and every time is the watch's. The rate uses upstream's
own statistic (:mod:`dra_harness.bench.throughput`), so ``bench compare`` divides like by like.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dra_harness.bench.throughput import samples, summarise
from dra_harness.checks import metrics as prom
from dra_harness.contention import metrics
from dra_harness.contention.bench import bench_scenario, recorded
from dra_harness.contention.recorder import Recorder
from dra_harness.contention.runner import send_arrivals
from dra_harness.contention.topology import DRIVER, Topology
from dra_harness.errors import ClusterError
from dra_harness.kube import builders, rest
from dra_harness.kube.rest import Kube

#: Pods never finish during a burst (upstream's do not run at all): their devices stay taken.
_HOLD_S = 3600.0

#: Where a burst's time goes that the rate alone hides. The API server's watch cache closes a watcher
#: whose buffer stays full once its dispatch budget (100 ms, refilled 50 ms/s) is spent; every closed
#: watcher relists (the scheduler's and KWOK's included), and KWOK's relist replays its ready stage for
#: pods whose patch is in flight: a second pod IP, refused with 422.
API_SERVER_SERIES = {
    "watchers_closed_pods": prom.series("apiserver_terminated_watchers_total", resource="pods"),
    "watchers_closed_claims": prom.series("apiserver_terminated_watchers_total", resource="resourceclaims"),
    "pod_status_patches_refused": prom.series("apiserver_request_total", resource="pods", subresource="status",
                                              verb="PATCH", code="422"),
}


def api_server_counts(kube: Kube) -> dict[str, float]:
    """The :data:`API_SERVER_SERIES` now (empty where the API server's /metrics cannot be read)."""
    try:
        text = kube.raw("/metrics", timeout=20)
    except (rest.ApiError, rest.Unreachable):
        return {}
    got = prom.read(text, list(API_SERVER_SERIES.values()))
    return {name: got.get(prom.key(s), 0.0) for name, s in API_SERVER_SERIES.items()}


class BurstError(ClusterError):
    """The burst's pods were not all scheduled in time."""


def preallocate(kube: Kube, topo: Topology, namespace: str, count: int, device_class: str) -> None:
    """``count`` claims holding the first ``count`` devices, allocated by writing their status."""
    if count > len(topo.devices):
        raise BurstError(f"{count} pre-allocated claims need more than the {len(topo.devices)} devices")
    for i, device in enumerate(topo.devices[:count]):
        claim = kube.create(rest.RESOURCE_CLAIMS, builders.claim(f"init-{i}", topo.run_id, [
            builders.exactly("gpu", device_class)]), namespace)
        claim["status"] = {"allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": device.node, "device": device.name}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [device.node]}]}]},
        }}
        kube.replace_status(rest.RESOURCE_CLAIMS, claim)


def burst(kube: Kube, run_id: str, k8s_version: str, nodes: int, devices_per_node: int, init_claims: int, pods: int,
          out: Path, timeout: float = 600.0, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Create ``pods`` template pods at once into a cluster ``init_claims`` devices full; pods/s to allocated and scheduled."""
    if init_claims + pods > nodes * devices_per_node:
        raise BurstError(f"{init_claims} pre-allocated claims and {pods} pods need more than {nodes * devices_per_node} devices")
    topo = Topology(kube, bench_scenario("bench-burst", nodes, devices_per_node, pods, 0.001, _HOLD_S), run_id)
    started = time.monotonic()
    with recorded(kube, topo, "burst", create_timeout=max(120.0, nodes * 0.5),
                  prepare=lambda ns: preallocate(kube, topo, ns, init_claims, topo.class_name("shared", "bench"))) as (ns, rec):
        names = [f"b-{i}" for i in range(pods)]
        arrivals: list[dict[str, Any]] = [{"name": n, "tier": "bench", "at": 0.0,
                                           "body": topo.pod("shared", n, "bench", _HOLD_S)} for n in names]
        before = api_server_counts(kube)
        t0 = time.time() + 1.0
        sent = send_arrivals(kube, ns, arrivals, t0, timeout=timeout)
        sent = [s for s in sent if "locust" not in s]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with rec.lock:
                done = sum(1 for n in names if (r := rec.jobs.get(n)) and r.scheduled)
            if progress:
                progress(done)
            if done == pods:
                break
            time.sleep(0.25)
        else:
            raise BurstError(f"{pods - done} of {pods} burst pods not scheduled after {timeout:.0f} s")
        after = api_server_counts(kube)
    return summarise_burst(rec, names, sorted(s["sent"] for s in sent), k8s_version, nodes, devices_per_node,
                           init_claims, out, time.monotonic() - started,
                           {k: int(after[k] - before[k]) for k in after if k in before})


def summarise_burst(rec: Recorder, names: list[str], sends: list[float], k8s_version: str, nodes: int,
                    devices_per_node: int, init_claims: int, out: Path, wall_s: float,
                    api_server: dict[str, int] | None = None) -> dict[str, Any]:
    with rec.lock:
        jobs = [rec.jobs[n] for n in names if n in rec.jobs]
    first = min(j.created for j in jobs if j.created)
    scheduled = [j.scheduled for j in jobs if j.scheduled]
    allocated = [j.allocated for j in jobs if j.allocated]
    span = lambda ts: (len(ts) / (max(ts) - first)) if ts and max(ts) > first else None  # noqa: E731
    result: dict[str, Any] = {
        "bench": "burst", "k8s_version": k8s_version, "nodes": nodes, "devices": nodes * devices_per_node,
        "init_claims": init_claims, "pods": len(names), "scheduled": len(scheduled),
        "pods_per_node": dict(Counter(j.node for j in jobs if j.node)),
        "scheduling_throughput": summarise(samples(scheduled, first)),
        "created_to_scheduled_per_s": span(scheduled), "created_to_allocated_per_s": span(allocated),
        "creation_per_s": (len(sends) - 1) / (sends[-1] - sends[0]) if len(sends) > 1 else None,
        "pod_wait_s": {k: metrics.percentile([j.scheduled - j.created for j in jobs if j.scheduled and j.created], q)
                       for k, q in (("p50", 50), ("p95", 95), ("p99", 99))},
        "wall_s": round(wall_s, 1),
        "api_server": api_server or {},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"burst-{nodes}nodes-{len(names)}pods.json").write_text(json.dumps(result, indent=1))
    return result
