"""From job records and device holds to the design comparison: pure functions, unit-tested.

Waits are *scenario* seconds (wall seconds x time_compression), the unit tolerable
waits are written in; ``wait_wall_s`` keeps the measured wall-clock figures. A tier
meets its tolerable wait when its p95 wait is within it and none of its jobs was lost, unless
that wait is within the control plane's floor at this compression: then "not established".
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from dra_harness.contention.plan import Job
from dra_harness.contention.recorder import Hold, JobRecord
from dra_harness.contention.scenario import Scenario


#: The verdict of a tier whose tolerable wait is within the control plane's floor (:mod:`.floor`).
NOT_ESTABLISHED = "not established"


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def lost_jobs(jobs: list[Job], records: dict[str, JobRecord]) -> dict[str, str]:
    """Job -> why it is lost: never created, failed, deleted before completing, or still unfinished."""
    lost = {}
    for j in jobs:
        r = records.get(j.name)
        if r is None or r.created is None:
            lost[j.name] = "never created"
        elif r.completed is not None:
            continue
        elif r.failed is not None:
            lost[j.name] = "failed"
        elif r.deleted is not None:
            lost[j.name] = f"deleted before completing{f' ({r.preempted})' if r.preempted else ''}"
        elif r.running is not None:
            lost[j.name] = "still running at the deadline"
        else:
            lost[j.name] = f"never started{f': {r.first_message}' if r.first_message else ''}"
    return lost


def wait_wall(r: JobRecord | None) -> float | None:
    if r is None or r.created is None or r.running is None:
        return None
    return max(0.0, r.running - r.created)


def utilisation(holds: list[Hold], t0: float, t_end: float, total: int, compression: float,
                step_wall: float = 0.5) -> dict:
    """Busy devices sampled every ``step_wall`` seconds; t_s in scenario seconds."""
    samples = []
    n = max(1, math.ceil((t_end - t0) / step_wall))
    for i in range(n + 1):
        t = t0 + i * step_wall
        busy = sum(len(h.devices) for h in holds if h.start <= t and (h.end is None or h.end > t))
        samples.append([round((t - t0) * compression, 1), busy, total])
    mean = sum(s[1] for s in samples) / (len(samples) * total) if samples and total else 0.0
    return {"mean": round(mean, 4), "samples": samples}


def idle_reserved(holds: list[Hold], reserved: set[str], t0: float, t_end: float, compression: float) -> float:
    """Scenario device-seconds during which reserved devices held nothing."""
    if not reserved or t_end <= t0:
        return 0.0
    busy = 0.0
    for h in holds:
        n = sum(1 for d in h.devices if d in reserved)
        if n:
            busy += n * max(0.0, min(h.end or t_end, t_end) - max(h.start, t0))
    return round((len(reserved) * (t_end - t0) - busy) * compression, 1)


def tiers(scenario: Scenario, jobs: list[Job], records: dict[str, JobRecord], lost: dict[str, str],
          established_above_s: float | None = None) -> list[dict]:
    """Per tier: waits, jobs over the tolerable wait, and the verdict. A tolerable wait not above
    ``established_above_s`` (the floor times its factor, scenario seconds) gets no verdict: "not established"."""
    out = []
    for t in scenario.tiers:
        mine = [j for j in jobs if j.tier == t.name]
        walls = [w for j in mine if (w := wait_wall(records.get(j.name))) is not None]
        waits = [w * scenario.time_compression for w in walls]
        over = sum(1 for w in waits if w > t.tolerable_wait_s)
        tier_lost = sum(1 for j in mine if j.name in lost)
        p95 = percentile(waits, 95)
        meets = tier_lost == 0 and p95 is not None and p95 <= t.tolerable_wait_s
        verdict = "meets" if meets else "misses"
        if established_above_s is not None and t.tolerable_wait_s <= established_above_s:
            verdict = NOT_ESTABLISHED
        out.append({
            "tier": t.name, "priority": t.priority, "jobs": len(mine), "devices_per_job": t.devices_per_job,
            "wait_s": {k: _r(percentile(waits, q), 1) for k, q in (("p50", 50), ("p95", 95), ("p99", 99))}
            | {"max": _r(max(waits), 1) if waits else None},
            "wait_wall_s": {k: _r(percentile(walls, q)) for k, q in (("p50", 50), ("p95", 95), ("p99", 99))}
            | {"max": _r(max(walls)) if walls else None},
            "tolerable_wait_s": t.tolerable_wait_s, "over_tolerable": over + tier_lost, "lost": tier_lost,
            "verdict": verdict,
        })
    return out


def raw_waits(scenario: Scenario, jobs: Iterable[Job], records: dict[str, JobRecord]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {t.name: [] for t in scenario.tiers}
    for j in jobs:
        w = wait_wall(records.get(j.name))
        if w is not None:
            out[j.tier].append(w * scenario.time_compression)
    return out


def saved_work(runs: list[list[float]], checkpoint_wall_s: float | None) -> tuple[float, float]:
    """(work saved, work lost) in wall seconds after ``runs`` ([start, end] each, the last one
    interrupted): progress is kept up to the last checkpoint, the rest is lost with the eviction."""
    saved = lost = 0.0
    for start, end in runs:
        progress = saved + max(0.0, end - start)
        kept = math.floor(progress / checkpoint_wall_s) * checkpoint_wall_s if checkpoint_wall_s else 0.0
        lost += progress - kept
        saved = kept
    return saved, lost


def evictions(scenario: Scenario, jobs: list[Job], records: dict[str, JobRecord]) -> dict[str, dict]:
    """Per tier: evictions, device-hours of work they threw away, and how long evicted jobs waited to run again
    (scenario seconds). A job's runs before each eviction count; its last, completed run does not."""
    out = {}
    for t in scenario.tiers:
        ckpt = scenario.wall(t.checkpoint_interval_s) if t.checkpoint_interval_s else None
        count, lost_wall, requeue = 0, 0.0, []
        for j in (j for j in jobs if j.tier == t.name):
            r = records.get(j.name)
            if r is None or not r.evictions:
                continue
            count += len(r.evictions)
            interrupted = [run for run in r.runs if run[1] in r.evictions]
            lost_wall += saved_work(interrupted, ckpt)[1] * j.devices
            starts = sorted(run[0] for run in r.runs)
            for e in r.evictions:
                nxt = next((s for s in starts if s > e), None)
                if nxt is not None:
                    requeue.append((nxt - e) * scenario.time_compression)
        out[t.name] = {
            "evictions": count, "interruptible": t.interruptible,
            "checkpoint_interval_s": t.checkpoint_interval_s,
            "lost_device_hours": round(lost_wall * scenario.time_compression / 3600, 2),
            "requeue_wait_s": {k: _r(percentile(requeue, q), 1) for k, q in (("p50", 50), ("p95", 95))}
            | {"max": _r(max(requeue), 1) if requeue else None, "count": len(requeue)},
        }
    return out
