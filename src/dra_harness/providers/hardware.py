"""The hardware a cluster should publish, and the devices its ResourceSlices do publish per node.

Why in providers: every provider answers "what should be here" with a :class:`Hardware`
(the user's ``--expected-hardware`` file, or what the provider itself started), and the
checks compare it with :func:`devices_by_node`. Pure logic over plain dicts: no API access.
"""

from __future__ import annotations

import re
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


_SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")


def hardware_slices(hw: Hardware) -> list[Obj]:
    """Slices as a driver would publish ``hw``: one pool per node, devices ``gpu-0``.. with the
    file's attributes and capacity. A string that is a semantic version (``1.0.0``) becomes a
    version attribute, as drivers publish ``driverVersion``; what else a real slice carries
    (``index``, ``uuid``) the file does not say, so selectors on it match nothing here."""
    def attribute(value: Any) -> Obj:
        if isinstance(value, bool):
            return {"bool": value}
        if isinstance(value, int):
            return {"int": value}
        return {"version": value} if _SEMVER.match(str(value)) else {"string": str(value)}

    attrs = {k: attribute(v) for k, v in hw.attributes.items()}
    capacity = {k: {"value": v} for k, v in hw.capacity.items()}
    return [{"metadata": {"name": f"{node}-expected"},
             "spec": {"driver": hw.driver, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                      "devices": [{"name": f"gpu-{i}", "attributes": attrs, "capacity": capacity} for i in range(count)]}}
            for node, count in sorted(hw.nodes.items())]
