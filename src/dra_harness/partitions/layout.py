"""A partitionable-device layout, and what must hold of any set of allocations in it.

The layout file is the hardware's truth, written independently of the slices: each GPU has
``memory_slices`` slices, a profile takes ``slices`` of them at one of its ``starts``. The
harness publishes that layout as shared counters (one counter per memory slice, value 1)
and partition devices that consume them; kube-scheduler's allocator must then never give
out two partitions that share a slice. The checks here compute from the file, never from
the published slices, so a slice that double-counts a counter is caught rather than believed.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_harness import yamlfile
from dra_harness.errors import InputError


class LayoutError(InputError):
    """A layout file is malformed; one line naming the file, the field and the problem."""


_NAME = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,14}[a-z0-9])?$"}
_MIX = {"type": "object", "minProperties": 1, "additionalProperties": {"type": "integer", "minimum": 1}}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "nodes", "gpus_per_node", "memory_slices", "profiles", "tenants", "stream"],
    "properties": {
        "name": _NAME,
        "description": {"type": "string"},
        "seed": {"type": "integer"},
        "nodes": {"type": "integer", "minimum": 1, "maximum": 500},
        "gpus_per_node": {"type": "integer", "minimum": 1, "maximum": 8},  # 8 counter sets fit one slice
        "memory_slices": {"type": "integer", "minimum": 1, "maximum": 32},  # 32 counters fit one set
        "profiles": {"type": "object", "minProperties": 1, "additionalProperties": {
            "type": "object", "additionalProperties": False, "required": ["slices", "starts"],
            "properties": {"slices": {"type": "integer", "minimum": 1},
                           "starts": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}}}},
        "tenants": {"type": "object", "minProperties": 1, "additionalProperties": {
            "type": "object", "additionalProperties": False,
            "properties": {"quota": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}}}},
        "stream": {"type": "object", "additionalProperties": False, "required": ["fill"], "properties": {
            "fill": {"type": "object", "additionalProperties": False, "required": ["requests", "mix"],
                     "properties": {"requests": {"type": "integer", "minimum": 1, "maximum": 20000}, "mix": _MIX}},
            "churn": {"type": "object", "additionalProperties": False, "required": ["release", "requests", "mix"],
                      "properties": {"release": {"type": "number", "minimum": 0, "maximum": 1},
                                     "requests": {"type": "integer", "minimum": 0, "maximum": 20000}, "mix": _MIX}}}},
    },
}


@dataclass(frozen=True)
class Partition:
    """One partition device: ``profile`` at memory slices ``start``..``start+size-1`` of GPU ``gpu`` of ``node``."""

    node: int
    gpu: int
    profile: str
    start: int
    size: int

    @property
    def name(self) -> str:
        return f"gpu{self.gpu}-{self.profile}-{self.start}"

    @property
    def slices(self) -> range:
        return range(self.start, self.start + self.size)


@dataclass(frozen=True)
class Request:
    """One request of the stream: a tenant asks for one partition of a profile."""

    index: int
    tenant: str
    profile: str


@dataclass
class Layout:
    name: str
    nodes: int
    gpus_per_node: int
    memory_slices: int
    profiles: dict[str, tuple[int, list[int]]]  # profile -> (slices, starts)
    quotas: dict[str, dict[str, int]]  # tenant -> profile -> most partitions at once
    fill: tuple[int, dict[str, int]]
    churn: tuple[float, int, dict[str, int]] | None
    seed: int = 0
    description: str = ""
    tenants: list[str] = field(default_factory=list)

    def partitions(self) -> list[Partition]:
        return [Partition(n, g, p, start, size) for n in range(self.nodes) for g in range(self.gpus_per_node)
                for p, (size, starts) in self.profiles.items() for start in starts]

    @property
    def total_slices(self) -> int:
        return self.nodes * self.gpus_per_node * self.memory_slices

    def requests(self, phase: str, first: int = 0) -> list[Request]:
        """The phase's requests: profiles by the mix's weights, tenants in turn, seeded."""
        if phase == "fill":
            count, mix = self.fill
        else:
            assert self.churn is not None
            _, count, mix = self.churn
        rng = random.Random(f"{self.seed}-{phase}")
        profiles = rng.choices(list(mix), weights=list(mix.values()), k=count)
        return [Request(first + i, self.tenants[(first + i) % len(self.tenants)], p) for i, p in enumerate(profiles)]


def parse(data: dict[str, Any], file: str) -> Layout:
    prefix = f"layout file {file}"
    yamlfile.validate(data, SCHEMA, LayoutError, prefix)
    slices = data["memory_slices"]
    profiles: dict[str, tuple[int, list[int]]] = {}
    for name, p in data["profiles"].items():
        bad = [s for s in p["starts"] if s + p["slices"] > slices]
        if bad:
            raise LayoutError(f"{prefix}: profiles.{name}.starts: {bad} run past memory slice {slices - 1}")
        if not _valid_name(name):
            raise LayoutError(f"{prefix}: profiles.{name}: a profile name is lowercase letters, digits and '-'")
        profiles[name] = (p["slices"], sorted(set(p["starts"])))
    quotas = {t: dict(v.get("quota", {})) for t, v in data["tenants"].items()}
    for tenant, quota in quotas.items():
        if not _valid_name(tenant):
            raise LayoutError(f"{prefix}: tenants.{tenant}: a tenant name is lowercase letters, digits and '-'")
        unknown = sorted(set(quota) - set(profiles))
        if unknown:
            raise LayoutError(f"{prefix}: tenants.{tenant}.quota: no profile named {', '.join(unknown)}")
    stream = data["stream"]
    for phase in ("fill", "churn"):
        unknown = sorted(set(stream.get(phase, {}).get("mix", {})) - set(profiles))
        if unknown:
            raise LayoutError(f"{prefix}: stream.{phase}.mix: no profile named {', '.join(unknown)}")
    churn = stream.get("churn")
    return Layout(
        name=data["name"], nodes=data["nodes"], gpus_per_node=data["gpus_per_node"], memory_slices=slices,
        profiles=profiles, quotas=quotas, seed=data.get("seed", 0), description=data.get("description", ""),
        fill=(stream["fill"]["requests"], stream["fill"]["mix"]),
        churn=(churn["release"], churn["requests"], churn["mix"]) if churn else None,
        tenants=list(data["tenants"]),
    )


def _valid_name(name: str) -> bool:
    return bool(name) and len(name) <= 16 and all(c.isdigit() or c == "-" or "a" <= c <= "z" for c in name) \
        and name[0] != "-" and name[-1] != "-"


def load(path: str | Path) -> Layout:
    file = str(path)
    return parse(yamlfile.load(path, LayoutError, f"layout file {file}"), file)


# -- what must hold of allocations, computed from the layout ---------------------------------
Held = dict[tuple[int, str], str]  # (node, device name) -> who holds it


def overcommits(layout: Layout, held: Held) -> list[str]:
    """Memory slices that more than one held partition uses: each names the slice and its holders."""
    by_name = {(p.node, p.name): p for p in layout.partitions()}
    users: dict[tuple[int, int, int], list[str]] = defaultdict(list)
    unknown = []
    for key, holder in sorted(held.items()):
        part = by_name.get(key)
        if part is None:
            unknown.append(f"{holder} holds node {key[0]} device {key[1]}, which the layout does not have")
            continue
        for s in part.slices:
            users[part.node, part.gpu, s].append(f"{part.name} ({holder})")
    return unknown + [f"node {n} gpu {g} memory slice {s} used by {' and '.join(u)}"
                      for (n, g, s), u in sorted(users.items()) if len(u) > 1]


def used_slices(layout: Layout, held: Held) -> set[tuple[int, int, int]]:
    by_name = {(p.node, p.name): p for p in layout.partitions()}
    return {(p.node, p.gpu, s) for key in held if (p := by_name.get(key)) for s in p.slices}


def free_placements(layout: Layout, held: Held, profile: str) -> list[Partition]:
    """Partitions of ``profile`` whose slices are all free: where a request for it could go now."""
    used = used_slices(layout, held)
    return [p for p in layout.partitions() if p.profile == profile
            and (p.node, p.name) not in held and not any((p.node, p.gpu, s) in used for s in p.slices)]


def fragmentation(layout: Layout, held: Held, waiting: list[Request]) -> dict[str, Any]:
    """Waiting requests that no placement fits although enough slices are free in all (or on one GPU)."""
    used = used_slices(layout, held)
    free = layout.total_slices - len(used)
    per_gpu: dict[tuple[int, int], int] = defaultdict(int)
    for n in range(layout.nodes):
        for g in range(layout.gpus_per_node):
            per_gpu[n, g] = layout.memory_slices - sum((n, g, s) in used for s in range(layout.memory_slices))
    largest = max(per_gpu.values(), default=0)
    fragmented = [r for r in waiting if layout.profiles[r.profile][0] <= free]
    on_one_gpu = [r for r in waiting if layout.profiles[r.profile][0] <= largest]
    return {
        "free_slices": free, "total_slices": layout.total_slices, "largest_free_on_one_gpu": largest,
        "waiting": len(waiting), "waiting_with_enough_free_slices": len(fragmented),
        "waiting_with_enough_free_slices_on_one_gpu": len(on_one_gpu),
        "fragmented_share": round(len(fragmented) / len(waiting), 3) if waiting else 0.0,
    }
