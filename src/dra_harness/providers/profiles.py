"""Driver profiles: what a suite needs to know about a DRA driver, so that no suite names one.

A profile (``data/profiles/<name>.yaml``) maps the suites' logical vocabulary
(uuid, model, memory, what a container sees) to a driver's published names. On an
existing cluster the profile is detected from the DeviceClasses and ResourceSlices
it serves; ``--driver`` picks one by profile or driver name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_harness import data
from dra_harness import yamlfile
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.errors import InputError

#: The example driver's name: the embedded cluster's and kind's default driver.
EXAMPLE_DRIVER = "gpu.example.com"
PROFILE_DIR = data.path("profiles")

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "driver", "deviceClass", "attributes", "capacity", "containerView"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "driver": {"type": "string"},
        "deviceClass": {"type": "string"},
        "attributes": {"type": "object", "required": ["uuid", "model"], "additionalProperties": {"type": "string"}},
        "capacity": {"type": "object", "required": ["memory"], "additionalProperties": {"type": "string"}},
        "coplacementAttributes": {"type": "array", "items": {"type": "string"}},
        "containerView": {"enum": ["env", "nvml"]},
        "sharingConfig": {"type": "object"},
        # Every DeviceClass the driver installs, by role (gpu, mig, ...), and opaque configs by sharing strategy.
        "deviceClasses": {"type": "object", "additionalProperties": {"type": "string"}},
        "sharingConfigs": {
            "type": "object",
            "additionalProperties": {"type": "object", "required": ["apiVersion", "kind"]},
        },
        # Where the driver's kubelet plugin runs when installed as a DaemonSet: its pods are
        # the ones this DaemonSet owns, never whatever carries a generic label.
        "driverDaemonSet": {
            "type": "object",
            "required": ["namespace", "name"],
            "additionalProperties": False,
            "properties": {"namespace": {"type": "string"}, "name": {"type": "string"}},
        },
    },
}


class ProfileError(InputError):
    """No profile fits, or a profile file is invalid; the message is one line."""


@dataclass(frozen=True)
class DriverProfile:
    name: str
    driver: str
    device_class: str
    attributes: dict[str, str]
    capacity: dict[str, str]
    container_view: str
    coplacement_attributes: tuple[str, ...] = ()
    sharing_config: dict[str, Any] = field(default_factory=dict)
    #: (namespace, name) of the DaemonSet that runs the driver's kubelet plugin; ("", "") if unknown.
    driver_daemonset: tuple[str, str] = ("", "")
    #: DeviceClass by role (``gpu``, ``mig``); the default class is always under ``gpu``.
    device_classes: dict[str, str] = field(default_factory=dict)
    #: Opaque claim configs by sharing strategy (``TimeSlicing``, ``MPS``, ...).
    sharing_configs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def qualified(self, published: str) -> str:
        """``model`` -> ``gpu.example.com/model``; already-qualified names are kept."""
        return published if "/" in published else f"{self.driver}/{published}"

    def cel_attribute(self, logical: str) -> str:
        """CEL for a logical attribute, e.g. ``device.attributes['gpu.example.com'].model``."""
        domain, _, name = self.qualified(self.attributes[logical]).rpartition("/")
        return f"device.attributes['{domain}'].{name}"

    def cel_capacity(self, logical: str) -> str:
        domain, _, name = self.qualified(self.capacity[logical]).rpartition("/")
        return f"device.capacity['{domain}'].{name}"

    def device_attribute(self, device: dict, logical: str) -> Any:
        """The value a published device carries for a logical attribute (None if absent)."""
        from dra_harness.providers.hardware import attribute_value

        wanted = self.qualified(self.attributes.get(logical, logical))
        for key, value in (device.get("attributes") or {}).items():
            if self.qualified(key) == wanted:
                return attribute_value(value)
        return None


def load_profile(path: Path) -> DriverProfile:
    raw = yamlfile.load(path, ProfileError, f"profile {path}")
    yamlfile.validate(raw, _SCHEMA, ProfileError, f"profile {path}")
    return DriverProfile(
        name=raw["name"],
        driver=raw["driver"],
        device_class=raw["deviceClass"],
        attributes=raw["attributes"],
        capacity=raw["capacity"],
        container_view=raw["containerView"],
        coplacement_attributes=tuple(raw.get("coplacementAttributes", [])),
        sharing_config=raw.get("sharingConfig", {}),
        driver_daemonset=(raw["driverDaemonSet"]["namespace"], raw["driverDaemonSet"]["name"])
        if "driverDaemonSet" in raw else ("", ""),
        device_classes={"gpu": raw["deviceClass"], **raw.get("deviceClasses", {})},
        sharing_configs=raw.get("sharingConfigs", {}),
    )


def all_profiles() -> dict[str, DriverProfile]:
    return {p.name: p for p in (load_profile(f) for f in sorted(PROFILE_DIR.glob("*.yaml")))}


def by_name(name: str) -> DriverProfile:
    """A profile by profile name (``example``) or driver name (``gpu.example.com``)."""
    profiles = all_profiles()
    for p in profiles.values():
        if name in (p.name, p.driver):
            return p
    raise ProfileError(f"no driver profile {name!r}; known: {', '.join(sorted(profiles))}")


def detect(kube: Kube) -> DriverProfile:
    """The profile whose DeviceClass exists and whose driver publishes the most devices."""
    classes = {c["metadata"]["name"] for c in kube.list(rest.DEVICE_CLASSES)}
    devices: dict[str, int] = {}
    for s in kube.list(rest.RESOURCE_SLICES):
        devices[s["spec"]["driver"]] = devices.get(s["spec"]["driver"], 0) + len(s["spec"].get("devices") or [])
    candidates = [p for p in all_profiles().values() if p.device_class in classes and devices.get(p.driver)]
    if not candidates:
        published = ", ".join(f"{d} ({n} devices)" for d, n in sorted(devices.items())) or "none"
        raise ProfileError(
            f"no known DRA driver found (DeviceClasses: {', '.join(sorted(classes)) or 'none'}; "
            f"drivers publishing: {published}); pass --driver"
        )
    return max(candidates, key=lambda p: devices[p.driver])
