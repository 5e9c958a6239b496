"""The hardware a cluster should publish, and the devices its ResourceSlices do publish per node.

Why in providers: every provider answers "what should be here" with a :class:`Hardware`
(the user's ``--expected-hardware`` file, or what the provider itself started), and the
checks compare it with :func:`devices_by_node`. Pure logic over plain dicts: no API access.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_harness import yamlfile
from dra_harness.errors import InputError
from dra_harness.kube.types import DeviceAttribute, Obj, ResourceSlice, SliceDevice

HARDWARE_SCHEMA: Obj = {
    "type": "object",
    "required": ["driver", "nodes"],
    "additionalProperties": False,
    "properties": {
        "driver": {"type": "string", "minLength": 1},
        "deviceClass": {"type": "string", "minLength": 1},
        "nodes": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "type": "object",
                "required": ["devices"],
                "additionalProperties": False,
                "properties": {"devices": {"type": "integer", "minimum": 0}},
            },
        },
        "devices": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "attributes": {"type": "object", "additionalProperties": {"type": ["string", "integer", "boolean"]}},
                "capacity": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
    },
}


class HardwareFileError(InputError):
    """The expected-hardware file is unreadable or invalid; the message is one line."""


@dataclass(frozen=True)
class Hardware:
    driver: str
    nodes: dict[str, int]
    device_class: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    capacity: dict[str, str] = field(default_factory=dict)

    @property
    def total_devices(self) -> int:
        return sum(self.nodes.values())


def load_hardware(path: Path | str) -> Hardware:
    prefix = f"expected-hardware file {path}"
    raw = yamlfile.load(path, HardwareFileError, prefix)
    yamlfile.validate(raw, HARDWARE_SCHEMA, HardwareFileError, prefix)
    devices = raw.get("devices", {})
    return Hardware(
        driver=raw["driver"],
        device_class=raw.get("deviceClass", raw["driver"]),
        nodes={n: v["devices"] for n, v in raw["nodes"].items()},
        attributes=devices.get("attributes", {}),
        capacity=devices.get("capacity", {}),
    )


def attribute_value(attr: DeviceAttribute | Obj) -> Any:
    """The value of a slice attribute, whichever of the typed fields holds it."""
    for key in ("string", "int", "bool", "version"):
        if key in attr:
            return attr[key]
    return None


def newest_generation(slices: Sequence[ResourceSlice | Obj]) -> list[ResourceSlice | Obj]:
    """Slices of the newest generation of each pool (older ones are being replaced)."""
    gen: dict[str, int] = {}
    for s in slices:
        p = s["spec"]["pool"]
        gen[p["name"]] = max(gen.get(p["name"], 0), int(p.get("generation", 0)))
    return [s for s in slices if int(s["spec"]["pool"].get("generation", 0)) == gen[s["spec"]["pool"]["name"]]]


def devices_by_node(slices: Sequence[ResourceSlice | Obj], driver: str) -> dict[str, list[SliceDevice | Obj]]:
    out: dict[str, list[SliceDevice | Obj]] = defaultdict(list)
    for s in newest_generation([s for s in slices if s["spec"]["driver"] == driver]):
        node = s["spec"].get("nodeName")
        if node:
            out[node].extend(s["spec"].get("devices") or [])
    return dict(out)
