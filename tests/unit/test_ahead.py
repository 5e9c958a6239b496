"""The count that lets the virtual clock send an arrival ahead: it must refuse wherever some placement fails."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

from dra_harness.contention.ahead import Room
from dra_harness.contention.scenario import load
from dra_harness.contention.topology import Topology

ROOT = Path(__file__).resolve().parents[2]


def room(nodes: int, per_node: int, sizes: dict[str, int]) -> Room:
    keys = frozenset(f"n{n}/gpu-{d}" for n in range(nodes) for d in range(per_node))
    return Room({t: keys for t in sizes}, sizes)


def test_a_job_fits_while_whole_slots_outnumber_what_jobs_sent_ahead_can_take():
    r = room(2, 4, {"big": 4, "one": 1})
    assert r.fits("big", set(), [])
    assert r.fits("big", set(), ["big"])            # two whole nodes, one taken
    assert not r.fits("big", set(), ["big", "big"])
    assert r.fits("big", set(), ["one"]) and not r.fits("big", set(), ["one", "one"])  # one device on each node spoils both ...
    assert r.fits("big", {"n1/gpu-0"}, []) and not r.fits("big", {"n1/gpu-0"}, ["one"])
    assert r.fits("one", set(), ["big"] + ["one"] * 3)   # ... while single devices count one by one
    assert not r.fits("one", set(), ["big", "big"])


def test_negative_control_devices_spread_over_nodes_are_no_slot_for_a_job_of_several():
    r = room(4, 4, {"big": 4})
    held = {"n0/gpu-0", "n1/gpu-1", "n2/gpu-2", "n3/gpu-3"}  # 12 devices free, none of the nodes whole
    assert r.slots("big", held) == 0 and not r.fits("big", held, [])


def test_the_bound_holds_against_every_placement_of_the_jobs_sent_ahead():
    """Brute force on small shapes: whenever the bound says yes, every order and node choice still fits."""
    sizes = {"a": 1, "b": 2, "c": 3}
    r = room(3, 4, sizes)
    for held_n in range(0, 5):
        held = {f"n{i % 3}/gpu-{i // 3}" for i in range(held_n)}
        for ahead in itertools.chain.from_iterable(itertools.product(sizes, repeat=n) for n in range(4)):
            for new in sizes:
                if r.fits(new, held, list(ahead)):
                    assert all(_fits_after(free, sizes[new]) for free in _placements(held, list(ahead), sizes)), \
                        (held, ahead, new)


def _placements(held: set[str], ahead: list[str], sizes: dict[str, int]):
    """Every node choice for the jobs ``ahead`` in turn (each taking its devices on one node with room)."""
    states = [[4 - sum(1 for h in held if h.startswith(f"n{n}/")) for n in range(3)]]
    for tier in ahead:
        states = [s[:n] + [s[n] - sizes[tier]] + s[n + 1:] for s in states for n in range(3) if s[n] >= sizes[tier]]
    return states


def _fits_after(free: list[int], k: int) -> bool:
    return any(f >= k for f in free)


def test_a_design_s_room_is_what_its_classes_select():
    sc = load(ROOT / "fixtures" / "contention" / "virtual" / "two-tiers.yaml")  # serving 2 nodes for hi, batch 2 for lo
    topo = Topology(None, sc, uuid.uuid4().hex[:12])  # type: ignore[arg-type]
    pools, reserved = Room.of(topo, "pools"), Room.of(topo, "reserved")
    assert len(pools.eligible["hi"]) == len(pools.eligible["lo"]) == 8 and pools.eligible["hi"].isdisjoint(pools.eligible["lo"])
    assert pools.fits("hi", set(), ["lo"] * 5)      # another pool's jobs never take hi's devices
    assert len(reserved.eligible["hi"]) == 16 and len(reserved.eligible["lo"]) == 12  # hi's 4 reserved devices
    assert pools.size == {"hi": 1, "lo": 4}
