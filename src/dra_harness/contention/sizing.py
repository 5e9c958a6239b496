"""How many nodes a design needs: the sizing answer a procurement quote asks for.

Why: a contention run says whether a design meets every tier's tolerable wait on the cluster the
scenario describes; a buyer asks the converse, how small the cluster may be and still meet them. This
module scales a scenario to other node counts and searches for the smallest that meets, given a run
function (``run_at(scenario, design) -> result``): the command line passes one that runs each probe
on a cluster in virtual time, the unit tests a fake. Pure logic, no API access.

A size *meets* when every tier's verdict is "meets" and no job was lost. "not established" counts as
not meeting: a size whose answer rests on the control plane's speed cannot be sold as enough.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from dra_harness import yamlfile
from dra_harness.contention import plots
from dra_harness.contention.scenario import NodeGroup, Scenario
from dra_harness.errors import InputError

RunAt = Callable[[Scenario, str], dict]
#: Told each probe as it is recorded (the command line prints it).
Progress = Callable[[dict], None]

TIME_UNIT = ("waits (p95_s, tolerable_wait_s) in scenario seconds; wall_s in wall seconds; "
             "idle_reserved_device_h in scenario device-hours")
PARTITIONS_NOTE = "MIG-style partitions are recorded, not simulated: every probe runs on whole devices"


class SizingError(InputError):
    """A size or node shape the scenario cannot take (fewer nodes than node groups, a job wider than a node)."""


class HardwareShapeError(InputError):
    """The --hardware file is unreadable or invalid; the message is one line naming the file and the field."""


def minimum(sc: Scenario) -> int:
    """The smallest node count :func:`scaled` takes: one node per node group."""
    return max(1, len(sc.node_groups))


def _groups(groups: tuple[NodeGroup, ...], total: int, nodes: int) -> tuple[NodeGroup, ...]:
    """Largest-remainder apportionment of ``nodes`` over ``groups`` in proportion to their share of ``total``,
    every group at least one node (taken from the largest group). Like any such rounding it is not monotone
    in ``nodes`` (the Alabama paradox): one more node in all may leave a group with one fewer."""
    quotas = [g.nodes * nodes / total for g in groups]
    counts = [int(q) for q in quotas]
    by_remainder = sorted(range(len(groups)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in by_remainder[:nodes - sum(counts)]:
        counts[i] += 1
    for i, n in enumerate(counts):
        if n == 0:
            donor = max(range(len(counts)), key=lambda k: (counts[k], -k))
            counts[donor] -= 1
            counts[i] = 1
    return tuple(replace(g, nodes=n) for g, n in zip(groups, counts, strict=True))


def _reserved(devices: dict[str, int], total: int) -> dict[str, int]:
    """The reserved design's counts as written, cut (last-written tier first) to leave at least one device
    unreserved; a tier cut to nothing is dropped."""
    room = total - 1
    out: dict[str, int] = {}
    for tier, n in devices.items():
        keep = min(n, room - sum(out.values()))
        if keep > 0:
            out[tier] = keep
    return out


def scaled(sc: Scenario, nodes: int, devices_per_node: int | None = None) -> Scenario:
    """``sc`` on ``nodes`` nodes (of ``devices_per_node`` devices, default the scenario's own).

    Node groups keep their share of today's nodes (:func:`_groups`). The reserved design's counts are kept as
    written, not scaled: a reservation is the team's decision of how many devices a tier holds, and what is
    sized here is the cluster around it. They are capped so at least one device stays unreserved, because the
    other tiers would otherwise have no device at all (the scenario file refuses that too); a probe whose
    reservation was cut says so (:func:`search` records ``reserved_capped``).
    """
    per_node = devices_per_node or sc.devices_per_node
    where = f"sizing {sc.name} at {nodes} nodes x {per_node} devices"
    if nodes < minimum(sc):
        raise SizingError(f"{where}: needs at least {minimum(sc)} nodes (one per node group)")
    wide = [t for t in sc.tiers if t.devices_per_job > per_node]
    if wide:
        raise SizingError(f"{where}: tier {wide[0].name} needs {wide[0].devices_per_job} devices per job; "
                          f"a node of {per_node} cannot hold one")
    groups = _groups(sc.node_groups, sc.nodes, nodes) if sc.node_groups else ()
    designs = dict(sc.designs)
    if "reserved" in designs:
        designs["reserved"] = {**designs["reserved"],
                               "devices": _reserved(designs["reserved"]["devices"], nodes * per_node)}
    out = replace(sc, nodes=nodes, devices_per_node=per_node, node_groups=groups, designs=designs)
    reserved = sum((out.designs.get("reserved") or {}).get("devices", {}).values())
    if (groups and sum(g.nodes for g in groups) != nodes) or reserved >= out.total_devices:  # a bug here, not input
        raise AssertionError(f"{where}: groups {[g.nodes for g in groups]}, {reserved} reserved of {out.total_devices}")
    return out


def meets(result: dict) -> bool:
    """Every tier's verdict is "meets" and no job was lost ("not established" does not meet)."""
    return not result.get("jobs_lost") and all(t["verdict"] == "meets" for t in result["tiers"])


def _probe(s: Scenario, capped: bool, result: dict) -> dict:
    """One probe as recorded: enough to see a non-monotone answer without opening each run's JSON."""
    return {
        "nodes": s.nodes, "devices": s.total_devices, "meets": meets(result), "jobs_lost": result.get("jobs_lost") or 0,
        "tiers": {t["tier"]: {"verdict": t["verdict"], "p95_s": (t.get("wait_s") or {}).get("p95"),
                              "over_tolerable": t.get("over_tolerable") or 0} for t in result["tiers"]},
        "reserved_capped": capped, "wall_s": result.get("wall_s"),
    }


def search(sc: Scenario, design: str, run_at: RunAt, lo: int | None = None, hi: int | None = None,
           most_nodes: int = 200, progress: Progress | None = None, devices_per_node: int | None = None) -> dict:
    """The smallest node count in [``lo``, ``most_nodes``] at which ``design`` meets every tier.

    The first probe is ``hi`` (default: the scenario's own size). If it meets, bisect down towards ``lo``
    (default :func:`minimum`); if not, double until a size meets, then bisect between. Bisection assumes more
    nodes never hurt, and its own probes can never show otherwise, so one size larger than the answer is
    probed too; ``monotone`` is False when any larger probe missed while a smaller met. Never raises for a
    design that does not meet: ``nodes`` is then None and ``answer`` says the largest size tried.
    """
    started = time.monotonic()
    floor = max(lo or minimum(sc), minimum(sc))
    per_node = devices_per_node or sc.devices_per_node
    seen: dict[int, tuple[dict, dict]] = {}

    def probe(n: int) -> bool:
        if n not in seen:
            s = scaled(sc, n, per_node)
            result = run_at(s, design)
            rec = _probe(s, design == "reserved" and s.designs["reserved"] != sc.designs["reserved"], result)
            seen[n] = (result, rec)
            if progress:
                progress(rec)
        return seen[n][1]["meets"]

    start = min(max(hi or sc.nodes, floor), most_nodes)
    good: int | None = None
    bad = floor - 1
    if probe(start):
        good = start
    else:
        bad, n = start, start
        while good is None and n < most_nodes:
            n = min(2 * n, most_nodes)
            if probe(n):
                good = n
            else:
                bad = n
    while good is not None and good - bad > 1:
        mid = (good + bad) // 2
        if probe(mid):
            good = mid
        else:
            bad = mid
    if good is not None and good < most_nodes:
        probe(good + 1)
    probes = [seen[n][1] for n in sorted(seen)]
    smallest = min((p["nodes"] for p in probes if p["meets"]), default=None)
    monotone = smallest is None or all(p["meets"] for p in probes if p["nodes"] > smallest)
    out: dict[str, Any] = {
        "design": design, "nodes": good, "devices": good * per_node if good else None, "devices_per_node": per_node,
        "answer": f"meets at {good} nodes ({good * per_node} devices)" if good else f"does not meet at {max(seen)} nodes",
        "monotone": monotone, "tiers": [], "utilisation_mean": None, "idle_reserved_device_h": None, "one_smaller": None,
        "probes": probes, "runs": len(seen), "wall_s": round(time.monotonic() - started, 1),
    }
    if good is not None:
        found = seen[good][0]
        out["tiers"] = [{"tier": t["tier"], "p95_s": (t.get("wait_s") or {}).get("p95"),
                         "tolerable_wait_s": t.get("tolerable_wait_s"), "verdict": t["verdict"]} for t in found["tiers"]]
        out["utilisation_mean"] = (found.get("utilisation") or {}).get("mean")
        out["idle_reserved_device_h"] = round((found.get("idle_reserved_device_s") or 0) / 3600, 2)
        if good - 1 in seen:
            below = seen[good - 1][0]
            out["one_smaller"] = {
                "nodes": good - 1, "devices": (good - 1) * per_node, "jobs_lost": below.get("jobs_lost") or 0,
                "tiers_over": [t["tier"] for t in below["tiers"] if t["verdict"] == "misses"],
                "not_established": [t["tier"] for t in below["tiers"] if t["verdict"] == "not established"],
                "jobs_over": sum(t.get("over_tolerable") or 0 for t in below["tiers"]),
            }
    return out


HARDWARE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["devicesPerNode"],
    "additionalProperties": False,
    "properties": {
        "devicesPerNode": {"type": "integer", "minimum": 1, "maximum": 64},  # the scenario schema's limit
        "model": {"type": "string", "minLength": 1},
        "memoryGiB": {"type": "number", "exclusiveMinimum": 0},
        "partitions": {"type": "array", "items": {"type": "string", "minLength": 1}},
    },
}


def hardware(path: Path | str) -> dict:
    """The buyer's node shape from a ``--hardware`` file. Only ``devicesPerNode`` changes the probes; model and
    memory are carried into the answer, and partitions are recorded, not simulated (:data:`PARTITIONS_NOTE`)."""
    prefix = f"hardware file {path}"
    raw = yamlfile.load(path, HardwareShapeError, prefix)
    if "devicesPerNode" not in raw:  # jsonschema would name the top level; the field is what the user must add
        raise HardwareShapeError(f"{prefix}: devicesPerNode: is required (the devices one node holds)")
    yamlfile.validate(raw, HARDWARE_SCHEMA, HardwareShapeError, prefix)
    out = {"file": str(path), **raw}
    if raw.get("partitions"):
        out["partitions_note"] = PARTITIONS_NOTE
    return out


def write(out_dir: Path, scenario_name: str, rows: list[dict], hardware: dict | None) -> Path:
    """``<scenario>-sizing.json`` (the rows, the hardware, the units) and ``<scenario>-sizing.png``; returns the JSON."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png = f"{scenario_name}-sizing.png"
    plots.sizing(out_dir / png, f"{scenario_name}: devices needed to meet every tier", rows)
    path = out_dir / f"{scenario_name}-sizing.json"
    path.write_text(json.dumps({"scenario": scenario_name, "kind": "sizing", "time_unit": TIME_UNIT,
                                "hardware": hardware, "rows": rows, "plot": png}, indent=1))
    return path
