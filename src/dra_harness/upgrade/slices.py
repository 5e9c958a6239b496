"""How many devices each node publishes, sampled through the whole upgrade, and the gaps in it.

Why sample: a restarted kubelet deletes its node's ResourceSlices and the driver publishes them
again only when it notices; in between, every new claim for that node fails to schedule with
"cannot allocate all claims" (a stale or missing slice is the most common cause of Pending pods).
On v1.37.2 with the example driver v0.4.0 that gap is 46-54 s: the kubelet wipes every slice of its
node as it starts (before any driver registers), and the driver's ResourceSlice controller
(k8s.io/dynamic-resource-allocation v0.36.2, which the driver does not configure) publishes again
only ``SyncDelay`` (30 s) after the last change it saw.
A gap is reported as a finding with its length, not as a broken invariant: it is upstream
behaviour the user should plan the upgrade around.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from dra_harness.errors import KubeApiError
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.providers.hardware import devices_by_node


@dataclass(frozen=True)
class Gap:
    node: str
    #: Seconds since the first step; ``end`` None when the node never published its devices again.
    start: float
    end: float | None
    lowest: int

    def describe(self, expected: int) -> str:
        span = f"{self.end - self.start:.1f} s" if self.end is not None else "until the end of the upgrade"
        return f"{self.node} published {self.lowest} of {expected} devices for {span} (from {self.start:.1f} s)"


@dataclass
class SliceSampler:
    """A thread listing the driver's ResourceSlices every ``interval`` seconds (API outages skipped)."""

    kube: Kube
    driver: str
    nodes: list[str]
    t0: float
    interval: float = 0.25
    #: ``(seconds since t0, node -> devices)``.
    samples: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="slice-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                slices = self.kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={self.driver}")
            except KubeApiError:  # the API server is being swapped
                pass
            else:
                counts = {n: len(d) for n, d in devices_by_node(slices, self.driver).items()}
                self.samples.append((round(time.monotonic() - self.t0, 3), {n: counts.get(n, 0) for n in self.nodes}))
            self._stop.wait(self.interval)


def gaps(samples: list[tuple[float, dict[str, int]]], expected: int) -> list[Gap]:
    """Every stretch of samples in which a node published fewer than ``expected`` devices."""
    found: list[Gap] = []
    open_: dict[str, tuple[float, int]] = {}
    for at, counts in samples:
        for node, n in counts.items():
            if n < expected:
                start, lowest = open_.get(node, (at, n))
                open_[node] = (start, min(lowest, n))
            elif node in open_:
                start, lowest = open_.pop(node)
                found.append(Gap(node, start, at, lowest))
    found += [Gap(node, start, None, lowest) for node, (start, lowest) in open_.items()]
    return sorted(found, key=lambda g: (g.start, g.node))
