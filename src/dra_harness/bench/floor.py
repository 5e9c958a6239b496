"""Where the contention floor's time goes: one uncontended job's path, hop by hop, idle and warm.

Why: the floor (:mod:`dra_harness.contention.floor`, p95 of created -> Running for one job at
a time) caps how fast a scenario may run, so it caps how long contention takes. Its total hides
which component spends the time. This bench sends the same one-device template pods and stamps
every hop from the watches (:class:`~dra_harness.contention.recorder.Recorder`): the API server
answering the create, the controller-manager creating the claim, kube-scheduler allocating it and
binding the pod, KWOK marking it Running. Each pod is sent twice over: after ``gap`` idle seconds
(a job arriving at a quiet control plane) and back to back (the floor's own way, each sent when the
previous one runs), and beside them the machine's wake-up cost: a round trip to another process over
a Unix socket, and the API server's ``/version``, after the same idle gap and back to back. Where the
idle figures exceed the warm ones by the wake-up, the floor measures the machine, not the components.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from dra_harness.contention.bench import bench_scenario, recorded
from dra_harness.contention.metrics import percentile
from dra_harness.contention.recorder import JobRecord, Recorder
from dra_harness.contention.topology import Topology
from dra_harness.errors import ClusterError
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube

#: Each hop: its label, and the two stamps it lies between.
HOPS = (
    ("API server answers the pod create", "sent", "answered"),
    ("controller-manager creates the claim", "answered", "claim_created"),
    ("kube-scheduler allocates the claim", "claim_created", "allocated"),
    ("kube-scheduler binds the pod", "allocated", "scheduled"),
    ("KWOK marks the pod Running", "scheduled", "running"),
    ("created -> Running (the floor's measure)", "sent", "running"),
)
MODES = ("idle", "warm")
_RUNNING_TIMEOUT_S = 60.0


def _echo_server() -> None:
    """The child end of :func:`wake_up`: answer each byte on the socket whose descriptor it was given."""
    with socket.socket(fileno=int(sys.argv[1])) as s:
        while data := s.recv(1):
            s.sendall(data)


def _round_trips(call: Callable[[], object], samples: int, gap: float) -> list[float]:
    times = []
    for _ in range(samples):
        time.sleep(gap)
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def wake_up(kube: Kube, samples: int, gap: float) -> dict[str, dict[str, list[float]]]:
    """Round trips after ``gap`` idle seconds and back to back: to another process over a Unix socket, and
    the API server's ``/version`` (no storage, no admission: only the wake-up and the HTTP path)."""
    ours, theirs = socket.socketpair()
    child = subprocess.Popen([sys.executable, "-c", "from dra_harness.bench.floor import _echo_server; _echo_server()",
                              str(theirs.fileno())], pass_fds=(theirs.fileno(),))
    theirs.close()
    try:
        def echo() -> None:
            ours.sendall(b"x")
            ours.recv(1)

        return {
            "round trip to another process (Unix socket)": {m: _round_trips(echo, samples, gap if m == "idle" else 0.0)
                                                       for m in MODES},
            "API server /version": {m: _round_trips(lambda: kube.raw("/version"), samples, gap if m == "idle" else 0.0)
                                    for m in MODES},
        }
    finally:
        ours.close()
        child.wait(10)


def _stamps(rec: JobRecord, recorder: Recorder, sent: float, answered: float) -> dict[str, float | None]:
    with recorder.lock:  # the claim's first event, found by its owner (the claim's name has a random suffix)
        claim = next((s[0] for s in recorder.samples if s[1] == "claim" and s[4] == rec.name), None)
    return {"sent": sent, "answered": answered, "claim_created": claim, "allocated": rec.allocated,
            "scheduled": rec.scheduled, "running": rec.running}


def _one(kube: Kube, topo: Topology, recorder: Recorder, ns: str, name: str) -> dict[str, float | None]:
    sent = time.time()
    kube.create(rest.PODS, topo.pod("shared", name, "bench", None), ns)
    answered = time.time()
    deadline = time.monotonic() + _RUNNING_TIMEOUT_S
    while (rec := recorder.job(name)).running is None:
        if time.monotonic() > deadline:
            raise ClusterError(f"pod {ns}/{name} not Running after {_RUNNING_TIMEOUT_S:.0f}s: "
                               f"scheduled {rec.scheduled is not None}, claim allocated {rec.allocated is not None}, "
                               f"scheduler said {rec.first_message or 'nothing'}")
        time.sleep(0.002)
    kube.delete(rest.PODS, name, ns, grace_seconds=0)
    return _stamps(rec, recorder, sent, answered)


def hops(stamps: list[dict[str, float | None]]) -> dict[str, list[float]]:
    """Each hop's durations over the samples that stamped both its ends."""
    out: dict[str, list[float]] = {}
    for label, start, end in HOPS:
        out[label] = [s[end] - s[start] for s in stamps  # type: ignore[operator]
                      if s[start] is not None and s[end] is not None]
    return out


def run(kube: Kube, run_id: str, samples: int, gap: float, progress: Callable[[str], None]) -> dict:
    """Both modes' hops and the wake-up round trips; raw stamps kept for the JSON."""
    topo = Topology(kube, bench_scenario("bench-floor", 1, 4, samples, 1.0, 3600.0), run_id)
    with recorded(kube, topo, "floor") as (ns, recorder):
        stamps: dict[str, list[dict[str, float | None]]] = {}
        for mode in MODES:
            progress(f"{samples} pods, {'each after ' + format(gap, 'g') + ' s idle' if mode == 'idle' else 'back to back'}")
            stamps[mode] = []
            for i in range(samples):
                if mode == "idle":
                    time.sleep(gap)
                stamps[mode].append(_one(kube, topo, recorder, ns, f"{mode}-{i}"))
        progress("wake-up round trips")
        woken = wake_up(kube, samples, gap)
    return {"samples": samples, "gap_s": gap, "stamps": stamps,
            "hops": {mode: hops(stamps[mode]) for mode in MODES}, "wake_up": woken}


def rows(result: dict) -> list[tuple[str, str, str]]:
    """(figure, idle p50 / p95, warm p50 / p95) in milliseconds, for the hops and the wake-up."""
    def cell(values: list[float]) -> str:
        if not values:
            return "-"
        return f"{1000 * (percentile(values, 50) or 0):.1f} / {1000 * (percentile(values, 95) or 0):.1f}"

    out = [(label, cell(result["hops"]["idle"][label]), cell(result["hops"]["warm"][label])) for label, _, _ in HOPS]
    out += [(label, cell(modes["idle"]), cell(modes["warm"])) for label, modes in result["wake_up"].items()]
    return out


def save(result: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "floor.json"
    path.write_text(json.dumps(result, indent=1))
    return path
