"""Scheduling throughput the way scheduler_perf computes it, so the two figures compare.

scheduler_perf samples the count of scheduled pods once a second. Sampling starts at the
first tick that finds a pod scheduled; each later tick that finds new pods records
``new / seconds since the last recorded tick`` once per elapsed interval (a tick with
none is folded into the next), until every measured pod is scheduled; the collector then
stops, so the interval the last pod falls into is not counted. Its
``SchedulingThroughput`` is the average of those samples, with nearest-rank percentiles.
The harness sees each pod's scheduling as a watch event; replaying those times through
the same ticks gives the same statistic for the same work.
"""

from __future__ import annotations

import math
from typing import TypedDict


class Throughput(TypedDict):
    Average: float
    Perc50: float
    Perc90: float
    Perc95: float
    Perc99: float
    samples: int


def samples(scheduled_at: list[float], start: float, interval: float = 1.0) -> list[float]:
    """Per-interval pods/s from scheduling times, ticks every ``interval`` from ``start``."""
    times = sorted(scheduled_at)
    if not times:
        return []
    out: list[float] = []
    i, skipped = 0, 0
    tick = start + interval
    last_tick: float | None = None
    last_count = 0
    while tick <= times[-1]:
        while i < len(times) and times[i] <= tick:
            i += 1
        if last_tick is None:
            if i:  # the first tick with a pod scheduled starts the count
                last_tick, last_count = tick, i
        elif i == last_count:
            skipped += 1
        else:
            out += [(i - last_count) / (tick - last_tick)] * (skipped + 1)
            last_tick, last_count, skipped = tick, i, 0
        tick += interval
    return out


def summarise(values: list[float]) -> Throughput | None:
    """scheduler_perf's SchedulingThroughput summary (None when scheduling took under one interval)."""
    if not values:
        return None
    ordered = sorted(values)

    def rank(q: int) -> float:
        return ordered[math.ceil(len(ordered) * q / 100) - 1]

    return Throughput(Average=sum(ordered) / len(ordered), Perc50=rank(50), Perc90=rank(90), Perc95=rank(95),
                      Perc99=rank(99), samples=len(ordered))
