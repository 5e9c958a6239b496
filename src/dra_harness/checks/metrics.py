"""DRA metrics that must move: the scheduler's, the claim controller's and the kubelet's, before and after.

Operators are told to watch unschedulable pods, claim state and kubelet device metrics; a
dashboard is only worth something if those series move when DRA work happens. So a check takes
a snapshot of the components' ``/metrics`` (Prometheus text, parsed with prometheus_client),
does DRA work, reads again until each expected series has risen by its amount (or a deadline),
and names every one that did not. Names differ by version (an :class:`Expect` lists them); a
series no version's name is served under is reported as absent, not as still.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

#: A series: metric sample name and the labels it must carry (a subset of the sample's labels).
Series = tuple[str, tuple[tuple[str, str], ...]]
Snapshot = dict[str, float]  # "name{k=v,...}" of each matching series -> value, summed over other labels


def series(name: str, **labels: str) -> Series:
    return name, tuple(sorted(labels.items()))


def key(s: Series) -> str:
    return s[0] + ("{" + ",".join(f"{k}={v}" for k, v in s[1]) + "}" if s[1] else "")


def _samples(text: str) -> list[Any]:
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def read(text: str, wanted: list[Series], samples: list[Any] | None = None) -> Snapshot:
    """Each wanted series' value in ``text``: the sum over every sample that has its name and labels."""
    out: Snapshot = {}
    for sample in _samples(text) if samples is None else samples:
        for s in wanted:
            if sample.name == s[0] and all(sample.labels.get(k) == v for k, v in s[1]):
                out[key(s)] = out.get(key(s), 0.0) + sample.value
    return out


@dataclass(frozen=True)
class Movement:
    moved: dict[str, tuple[float, float]]
    #: Series that rose less than they had to: (before, after, the rise needed).
    still: dict[str, tuple[float, float, float]]
    absent: list[str]

    def problems(self) -> list[str]:
        return [f"{k} did not move (stayed {a:g})" if a == b else f"{k} rose {a - b:g} ({b:g} -> {a:g}), expected at least {n:g}"
                for k, (b, a, n) in sorted(self.still.items())] + [f"{k} is not served" for k in self.absent]


def movement(before: Snapshot, after: Snapshot, wanted: list[tuple[Series, float]]) -> Movement:
    """Which wanted series rose by their amount (a ``(series, rise needed)`` pair each), stayed, or were never served."""
    moved: dict[str, tuple[float, float]] = {}
    still: dict[str, tuple[float, float, float]] = {}
    absent: list[str] = []
    for s, needed in wanted:
        k = key(s)
        if k not in after:
            absent.append(k)
        elif after[k] - before.get(k, 0.0) >= needed:
            moved[k] = (before.get(k, 0.0), after[k])
        else:
            still[k] = (before.get(k, 0.0), after[k], needed)
    return Movement(moved, still, absent)


@dataclass(frozen=True)
class Expect:
    """One series that must rise by at least ``rise``, under any of the names versions gave it (newest first).
    A counter with labels is not served until its first sample, so the name is chosen from the later text."""

    names: tuple[Series, ...]
    rise: float = 1e-9

    def chosen(self, served: set[str]) -> Series:
        return next((c for c in self.names if c[0] in served), self.names[0])


def expect(*names: Series, rise: float = 1e-9) -> Expect:
    return Expect(names, rise)


def compare(before: str, after: str, expected: list[Expect]) -> Movement:
    later = _samples(after)  # parsed once: each settle round reads every component again
    served = {sample.name for sample in later}
    wanted = [(e.chosen(served), e.rise) for e in expected]
    series_ = [s for s, _ in wanted]
    return movement(read(before, series_), read(after, series_, later), wanted)


def settle(sources: Mapping[str, Callable[[], str]], expected: Mapping[str, list[Expect]], before: Mapping[str, str],
           timeout: float = 15.0) -> dict[str, Movement]:
    """Read the components again every 0.5 s until every expected series has risen by its amount, or
    ``timeout`` passes: gauges follow the work through informers and queues, a moment after it is done."""
    deadline = time.monotonic() + timeout
    while True:
        found = {c: compare(before[c], sources[c](), e) for c, e in expected.items()}
        if all(not m.problems() for m in found.values()) or time.monotonic() >= deadline:
            return found
        time.sleep(0.5)


def plugin_means(before: str, after: str, plugin: str = "DynamicResources") -> dict[str, float]:
    """Mean seconds a scheduler plugin spent per call at each extension point over the work between two
    texts (``scheduler_plugin_execution_duration_seconds``, which the scheduler samples: points with no
    sampled call in between are left out)."""
    def sums(text: str) -> dict[str, tuple[float, float]]:
        out: dict[str, tuple[float, float]] = {}
        for family in text_string_to_metric_families(text):
            if family.name != "scheduler_plugin_execution_duration_seconds":
                continue
            for sample in family.samples:
                if sample.labels.get("plugin") != plugin or sample.name.endswith("_bucket"):
                    continue
                point = sample.labels.get("extension_point", "?")
                total, count = out.get(point, (0.0, 0.0))
                out[point] = (total + sample.value, count) if sample.name.endswith("_sum") else (total, count + sample.value)
        return out

    b, a = sums(before), sums(after)
    return {point: (total - b.get(point, (0.0, 0.0))[0]) / (count - b.get(point, (0.0, 0.0))[1])
            for point, (total, count) in a.items() if count - b.get(point, (0.0, 0.0))[1] > 0}
