"""Whether one claim's devices share what its constraints asked for, judged by the hardware's layout."""

from __future__ import annotations

from collections.abc import Callable

from dra_harness.topology.fleet import NVLINK_DOMAIN, PCIE_ROOT, domain_of, gpu_of, root_of

#: Constrained attribute -> where the layout puts a device for it, and what that place is called.
PLACES: dict[str, tuple[Callable[[int], str], str]] = {
    PCIE_ROOT: (root_of, "PCIe root"), NVLINK_DOMAIN: (domain_of, "NVLink domain")}


def spread(devices: list[str], attribute: str) -> str | None:
    """A problem when ``devices`` (simulated GPU names) sit under more than one place of ``attribute``."""
    where, what = PLACES[attribute]
    places: dict[str, list[str]] = {}
    for d in sorted(devices):
        places.setdefault(where(gpu_of(d)), []).append(d)
    if len(places) <= 1:
        return None
    return f"{len(devices)} devices of one claim span {len(places)} {what}s: " + "; ".join(
        f"{p}: {', '.join(ds)}" for p, ds in sorted(places.items()))


def problems(devices: list[str], match: tuple[str, ...]) -> list[str]:
    """One line per constrained attribute whose place the devices do not all share."""
    return [p for a in match if (p := spread(devices, a))]
