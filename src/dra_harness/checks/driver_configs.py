"""Whether a node's driver publishes what a configuration (:mod:`dra_harness.providers.driver_configs`) says.

A restarted plugin republishes its pool; until it has, the slices are the old driver's. The
wait compares device names and what the configuration adds to each device, so a driver
that ignored its flags (or was never restarted) is caught here, not later as an odd allocation.
"""

from __future__ import annotations

from decimal import Decimal

from kubernetes.utils import parse_quantity

from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.kube.waits import watch_until
from dra_harness.providers.driver_configs import DriverConfig


def published_as(config: DriverConfig, device: Obj) -> bool:
    """The device carries what ``config`` adds (and nothing another configuration adds)."""
    if "--gpu-allow-multiple-allocations" in config.flags or config.profile in ("net", "cpu"):
        return device.get("allowMultipleAllocations") is True
    if "--binding-conditions" in config.flags:
        return bool(device.get("bindingConditions"))
    return not device.get("allowMultipleAllocations") and not device.get("bindingConditions")


def wait_published(kube: Kube, node: str, config: DriverConfig, count: int, timeout: float = 60.0) -> list[Obj]:
    """The node's slices of ``config``'s driver once they hold exactly its devices, as it publishes them."""
    want = set(config.devices(count))

    def devices(items: list[Obj]) -> list[Obj]:
        return [d for s in items for d in s["spec"].get("devices") or []]

    def why(items: list[Obj]) -> str:
        seen = devices(items)
        names = sorted(d["name"] for d in seen)
        unlike = sorted(d["name"] for d in seen if not published_as(config, d))
        return (f"devices {names[:6]}{'...' if len(names) > 6 else ''} (want {sorted(want)[:6]}"
                f"{'...' if len(want) > 6 else ''}){f'; not published as {config.name}: {unlike[:4]}' if unlike else ''}")

    return watch_until(
        kube, rest.RESOURCE_SLICES,
        lambda items: {d["name"] for d in devices(items)} == want and all(published_as(config, d) for d in devices(items)),
        timeout, f"the {config.driver} slices of {node} to show driver configuration {config.name}",
        field_selector=f"spec.driver={config.driver},spec.nodeName={node}", why=why)


def free_cpu(kube: Kube, node: str) -> Decimal:
    """The node's allocatable cpu less what its pods' containers request, as kube-scheduler counts it
    before any cpu a claim is charged (the cpu profile's node-allocatable devices)."""
    free = parse_quantity(kube.get(rest.NODES, node)["status"]["allocatable"]["cpu"])
    for p in kube.list(rest.PODS, field_selector=f"spec.nodeName={node}"):
        if p.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            free -= sum((parse_quantity(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
                         for c in p["spec"]["containers"]), Decimal(0))
    return free
