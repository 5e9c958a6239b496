"""Scenario files: workload classes, cluster shape, pool designs, time compression.

A scenario is written in *scenario time* (what the real workload would take: a
training job runs 2 h, inference must start within 5 min); ``time_compression``
maps it onto the wall clock (3600 = one hour of real work becomes one second).
Files are checked against a JSON schema and then for what a schema cannot say
(node groups add up, tiers exist); every problem is one line naming the file,
the field and what is wrong, so a CLI or pytest can print it without a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from dra_harness import yamlfile
from dra_harness.yamlfile import seconds
from dra_harness.errors import InputError

DESIGNS = ("shared", "reserved", "pools", "queue")


class ScenarioError(InputError):
    """A scenario file is malformed; the message is one line: ``scenario file <path>: field: problem``."""


_DURATION: dict[str, Any] = {"oneOf": [{"type": "number", "minimum": 0},
                       {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h|d)?\s*$"}]}
_NAME = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?$"}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "time_compression", "cluster", "tiers", "designs"],
    "properties": {
        "name": _NAME,
        "description": {"type": "string"},
        "seed": {"type": "integer"},
        "time_compression": {"type": "number", "exclusiveMinimum": 0},
        "cluster": {
            "type": "object",
            "additionalProperties": False,
            "required": ["nodes", "devices_per_node"],
            "properties": {
                "nodes": {"type": "integer", "minimum": 1, "maximum": 200},
                "devices_per_node": {"type": "integer", "minimum": 1, "maximum": 64},
                "node_groups": {
                    "type": "array", "minItems": 1,
                    "items": {
                        "type": "object", "additionalProperties": False,
                        "required": ["name", "nodes", "tiers"],
                        "properties": {
                            "name": _NAME,
                            "nodes": {"type": "integer", "minimum": 1},
                            "tiers": {"type": "array", "minItems": 1, "items": _NAME},
                        },
                    },
                },
            },
        },
        "tiers": {
            "type": "array", "minItems": 1,
            "items": {
                "type": "object", "additionalProperties": False,
                "required": ["name", "priority", "devices_per_job", "arrival", "duration", "tolerable_wait"],
                "properties": {
                    "name": _NAME,
                    "description": {"type": "string"},
                    "priority": {"type": "integer", "minimum": -2147483648, "maximum": 1000000000},
                    "devices_per_job": {"type": "integer", "minimum": 1},
                    "tolerable_wait": _DURATION,
                    "interruptible": {"type": "boolean"},
                    "checkpoint_interval": _DURATION,
                    "arrival": {
                        "type": "object",
                        "required": ["process", "count"],
                        "properties": {
                            "process": {"enum": ["poisson", "fixed", "burst"]},
                            "count": {"type": "integer", "minimum": 1, "maximum": 5000},
                            "rate_per_hour": {"type": "number", "exclusiveMinimum": 0},
                            "interval": _DURATION,
                            "start": _DURATION,
                        },
                        "additionalProperties": False,
                    },
                    "duration": {
                        "type": "object",
                        "required": ["distribution"],
                        "properties": {
                            "distribution": {"enum": ["fixed", "uniform", "exponential"]},
                            "value": _DURATION, "min": _DURATION, "max": _DURATION, "mean": _DURATION,
                        },
                        "additionalProperties": False,
                    },
                },
            },
        },
        "designs": {
            "type": "object", "additionalProperties": False, "minProperties": 1,
            "properties": {
                "shared": {"type": "object", "additionalProperties": False, "properties": {}},
                "reserved": {
                    "type": "object", "additionalProperties": False, "required": ["devices"],
                    "properties": {"devices": {"type": "object", "minProperties": 1,
                                               "additionalProperties": {"type": "integer", "minimum": 1}}},
                },
                "pools": {"type": "object", "additionalProperties": False, "properties": {}},
                "queue": {"type": "object", "additionalProperties": False,
                          "properties": {"preemption": {"type": "boolean"}}},
            },
        },
        "probe": {
            "type": "object", "additionalProperties": False,
            "properties": {"enabled": {"type": "boolean"}, "low_duration": _DURATION},
        },
        # On a cluster's own devices (contention.real_devices): which driver, and what names a device and a node group.
        "real_devices": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "driver": {"type": "string", "minLength": 1},
                "identity": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                "node_group_label": {"type": "string", "minLength": 1},
            },
        },
    },
}



@dataclass(frozen=True)
class Tier:
    name: str
    priority: int
    devices_per_job: int
    arrival: dict[str, Any]
    duration: dict[str, Any]
    tolerable_wait_s: float
    interruptible: bool = False
    checkpoint_interval_s: float | None = None   # work saved every so often; an eviction loses the rest


@dataclass(frozen=True)
class NodeGroup:
    name: str
    nodes: int
    tiers: tuple[str, ...]


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    time_compression: float
    nodes: int
    devices_per_node: int
    node_groups: tuple[NodeGroup, ...]
    tiers: tuple[Tier, ...]
    designs: dict[str, dict[str, Any]]
    seed: int = 1
    description: str = ""
    probe: dict[str, Any] = field(default_factory=dict)
    real_devices: dict[str, Any] = field(default_factory=dict)

    @property
    def total_devices(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def jobs_total(self) -> int:
        return sum(t.arrival["count"] for t in self.tiers)

    def tier(self, name: str) -> Tier:
        return next(t for t in self.tiers if t.name == name)

    def wall(self, scenario_s: float) -> float:
        """Scenario seconds -> wall-clock seconds."""
        return scenario_s / self.time_compression


def _field(path: Any) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _fail(file: str, where: str, problem: str) -> ScenarioError:
    problem = " ".join(problem.split())
    return ScenarioError(f"{_prefix(file)}: {where}: {problem[:300]}")


def _prefix(file: str) -> str:
    return f"scenario file {file}"


def parse(raw: Any, file: str) -> Scenario:
    """Validate a loaded document and build the :class:`Scenario`, or raise :class:`ScenarioError`."""
    if not isinstance(raw, dict):
        raise _fail(file, "(top level)", "must be a mapping of name, time_compression, cluster, tiers, designs")
    errors = sorted(jsonschema.Draft202012Validator(SCHEMA).iter_errors(raw), key=lambda e: list(e.absolute_path))
    if errors:
        err = jsonschema.exceptions.best_match(errors)
        message = yamlfile.problem(err)  # never the value itself, as for every file a user hands us
        if err.schema is _DURATION or (err.validator == "pattern" and err.validator_value == _DURATION["oneOf"][1]["pattern"]):
            message = "is not a duration (seconds, or a number with ms, s, m, h or d: 90s, 5m, 2h)"
        raise _fail(file, _field(err.absolute_path), message)
    tiers = []
    names = [t["name"] for t in raw["tiers"]]
    for i, t in enumerate(raw["tiers"]):
        where = f"tiers[{i}]"
        if names.count(t["name"]) > 1:
            raise _fail(file, f"{where}.name", f"tier {t['name']!r} is defined twice")
        if t["devices_per_job"] > raw["cluster"]["devices_per_node"]:
            raise _fail(file, f"{where}.devices_per_job",
                        f"{t['devices_per_job']} devices cannot fit on one node of {raw['cluster']['devices_per_node']}")
        a, d = t["arrival"], t["duration"]
        if a["process"] == "poisson" and "rate_per_hour" not in a:
            raise _fail(file, f"{where}.arrival.rate_per_hour", "a poisson arrival needs rate_per_hour")
        if a["process"] == "fixed" and "interval" not in a and "rate_per_hour" not in a:
            raise _fail(file, f"{where}.arrival.interval", "a fixed arrival needs interval (or rate_per_hour)")
        need = {"fixed": ["value"], "uniform": ["min", "max"], "exponential": ["mean"]}[d["distribution"]]
        for key in need:
            if key not in d:
                raise _fail(file, f"{where}.duration.{key}", f"a {d['distribution']} duration needs {key}")
        if d["distribution"] == "uniform" and seconds(d["min"]) > seconds(d["max"]):
            raise _fail(file, f"{where}.duration.min", "min is larger than max")
        if "checkpoint_interval" in t and not t.get("interruptible"):
            raise _fail(file, f"{where}.checkpoint_interval", "only an interruptible tier checkpoints (set interruptible: true)")
        tiers.append(Tier(t["name"], t["priority"], t["devices_per_job"], a, d, seconds(t["tolerable_wait"]),
                          bool(t.get("interruptible")),
                          seconds(t["checkpoint_interval"]) if "checkpoint_interval" in t else None))
    cl = raw["cluster"]
    groups = tuple(NodeGroup(g["name"], g["nodes"], tuple(g["tiers"])) for g in cl.get("node_groups") or [])
    designs = raw["designs"]
    if groups:
        if sum(g.nodes for g in groups) != cl["nodes"]:
            raise _fail(file, "cluster.node_groups",
                        f"groups hold {sum(g.nodes for g in groups)} nodes but cluster.nodes is {cl['nodes']}")
        for gi, g in enumerate(groups):
            for t in g.tiers:
                if t not in names:
                    raise _fail(file, f"cluster.node_groups[{gi}].tiers", f"unknown tier {t!r} (tiers: {', '.join(names)})")
        served = {t for g in groups for t in g.tiers}
        if "pools" in designs and set(names) - served:
            raise _fail(file, "cluster.node_groups", f"no group serves tier(s) {', '.join(sorted(set(names) - served))}")
    elif "pools" in designs:
        raise _fail(file, "designs.pools", "the pools design needs cluster.node_groups")
    for tier in (designs.get("reserved") or {}).get("devices", {}):
        if tier not in names:
            raise _fail(file, f"designs.reserved.devices.{tier}", f"unknown tier {tier!r} (tiers: {', '.join(names)})")
    queue = designs.get("queue")
    if queue is not None and queue.get("preemption", True):
        top = max(t.priority for t in tiers)
        # Kueue evicts by priority alone: it has no way to spare a lower-priority tier.
        for i, t in enumerate(tiers):
            if t.priority < top and not t.interruptible:
                raise _fail(file, f"tiers[{i}].interruptible",
                            f"the queue design preempts by priority and tier {t.name!r} is below the top priority; "
                            "mark it interruptible: true, or set designs.queue.preemption: false")
    reserved = sum((designs.get("reserved") or {}).get("devices", {}).values())
    if reserved >= cl["nodes"] * cl["devices_per_node"]:
        raise _fail(file, "designs.reserved.devices", f"reserves {reserved} of {cl['nodes'] * cl['devices_per_node']} devices; leave some for the other tiers")
    return Scenario(
        name=raw["name"], path=file, time_compression=float(raw["time_compression"]), nodes=cl["nodes"],
        devices_per_node=cl["devices_per_node"], node_groups=groups, tiers=tuple(tiers), designs=designs,
        seed=raw.get("seed", 1), description=raw.get("description", ""), probe=raw.get("probe") or {},
        real_devices=raw.get("real_devices") or {},
    )


def load(path: str | Path) -> Scenario:
    """Read and validate one scenario file."""
    file = str(path)
    return parse(yamlfile.load(path, ScenarioError, _prefix(file)), file)
