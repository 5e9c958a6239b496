"""The arrival plan: every job of a scenario, when it arrives and how long it runs.

Drawn once from the scenario's seed, so the three designs face exactly the same jobs
and a rerun faces the same jobs again. Times here are scenario seconds.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from dra_harness.contention.scenario import Scenario, Tier
from dra_harness.yamlfile import seconds


@dataclass(frozen=True)
class Job:
    name: str
    tier: str
    at_s: float          # arrival, scenario seconds after the start
    duration_s: float    # run time, scenario seconds
    devices: int

    def to_dict(self) -> dict:
        return asdict(self)


def _arrivals(t: Tier, rng: random.Random) -> list[float]:
    a = t.arrival
    start = seconds(a.get("start", 0))
    n = a["count"]
    if a["process"] == "burst":
        return [start] * n
    if a["process"] == "fixed":
        step = seconds(a["interval"]) if "interval" in a else 3600.0 / a["rate_per_hour"]
        return [start + i * step for i in range(n)]
    out, now = [], start
    for _ in range(n):
        now += rng.expovariate(a["rate_per_hour"] / 3600.0)
        out.append(now)
    return out


def _duration(t: Tier, rng: random.Random) -> float:
    d = t.duration
    if d["distribution"] == "fixed":
        return seconds(d["value"])
    if d["distribution"] == "uniform":
        return rng.uniform(seconds(d["min"]), seconds(d["max"]))
    value = rng.expovariate(1.0 / seconds(d["mean"]))
    return min(value, seconds(d["max"])) if "max" in d else value


def plan(scenario: Scenario) -> list[Job]:
    """All jobs in arrival order; names are ``<tier>-<n>``."""
    rng = random.Random(scenario.seed)
    jobs = []
    for t in scenario.tiers:
        for i, at in enumerate(_arrivals(t, rng)):
            jobs.append(Job(f"{t.name}-{i}", t.name, at, _duration(t, rng), t.devices_per_job))
    return sorted(jobs, key=lambda j: (j.at_s, j.name))
