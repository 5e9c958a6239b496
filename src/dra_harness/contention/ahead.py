"""Arrivals that provably find devices at once: sent ahead, without a settled step of their own.

Why: in virtual time each settled step costs the control plane's round trip (about 0.1 s of wall time
for a pod on two cores), and at light load most of a scenario's events are arrivals that find a
device free: mixed-1000 has 1,000 of them per design. Such an arrival's outcome is known before the
scheduler runs, so the virtual clock need not stop for it: the harness creates its pod and moves on,
and the job's run starts at its arrival by construction. The claim is checked, not trusted: the next
step that needs the cluster's state (an arrival that may not fit, a completion someone waits for, or
the job's own end) first settles and confirms that every pod sent ahead is Running; one that is not
is counted as a broken bound, and its wait is then what the watches saw.

The bound is a count that holds wherever kube-scheduler places the jobs. A job of ``k`` devices fits
on some node if the free devices its class may take give ``S = sum over nodes of floor(free / k)``
whole slots. Each job sent ahead and not yet holding devices takes ``k_i`` devices from one node, so
it removes at most ``ceil(k_i / k)`` of those slots, and only if its class shares devices with this
one. The new job therefore fits if ``S`` exceeds the slots the others can remove. It is only applied
while no other pod of the run waits for a device (a waiting pod, of any priority, could take the
device first) and only to designs without an admission layer (Kueue's quota is not counted here).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from dra_harness.contention.topology import Topology


@dataclass(frozen=True)
class Room:
    """Which devices each tier's class may take (``node/device``), and how many a tier's job asks for."""

    eligible: dict[str, frozenset[str]]
    size: dict[str, int]

    @classmethod
    def of(cls, topo: Topology, design: str) -> Room:
        tiers = topo.scenario.tiers
        return cls({t.name: frozenset(f"{d.node}/{d.name}" for d in topo.devices if topo.allows(design, t.name, d))
                    for t in tiers}, {t.name: t.devices_per_job for t in tiers})

    def slots(self, tier: str, held: Collection[str]) -> int:
        """Whole places for one ``tier`` job among the free devices its class may take."""
        k = self.size[tier]
        free = Counter(key.split("/", 1)[0] for key in self.eligible[tier] if key not in held)
        return sum(n // k for n in free.values())

    def fits(self, tier: str, held: Collection[str], ahead: Iterable[str]) -> bool:
        """Whether a ``tier`` job finds its devices on one node wherever the jobs of tiers ``ahead`` (sent, not
        yet holding devices) are placed; ``held``: the devices allocated now."""
        k, mine = self.size[tier], self.eligible[tier]
        taken = sum(-(-self.size[o] // k) for o in ahead if not mine.isdisjoint(self.eligible[o]))
        return self.slots(tier, held) > taken
