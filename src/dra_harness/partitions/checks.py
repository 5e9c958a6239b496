"""What the partition suite asserts of a stream's result, and what its negative controls expect to find.

Each function returns the violations (empty when the property holds), so the suite asserts
emptiness and a control asserts the fault it injected shows up.
"""

from __future__ import annotations

from typing import Any


def overcommitted(result: dict[str, Any]) -> list[str]:
    """Memory slices held by two partitions at a settled point (the layout's count, not the slices')."""
    return [f"{p['phase']}: {v}" for p in result["phases"] for v in p["overcommits"]]


def left_waiting(result: dict[str, Any]) -> list[str]:
    """Requests still refused while a placement for their profile was free, or never decided, when the wait ended."""
    out = []
    for p in result["phases"]:
        out += [f"{p['phase']}: {v}" for v in p["waiting_while_free"]]
        out += [f"{p['phase']}: {v} neither bound nor refused" for v in p["undecided"]]
    return out


def over_quota(result: dict[str, Any]) -> list[str]:
    return [f"{p['phase']}: {v}" for p in result["phases"] for v in p["quota_violations"]]


def quota_untested(result: dict[str, Any]) -> str | None:
    """Why the quota check proves nothing, or None: no tenant had a quota, or none was ever refused."""
    if not any(p["tenants"][t]["quota"] for p in result["phases"] for t in p["tenants"]):
        return "the layout gives no tenant a quota"
    if not result["quota_refusals"]:
        return "no tenant ever reached its quota, so no refusal was seen"
    return None


def fragmentation_finding(result: dict[str, Any]) -> str | None:
    """A sentence for the report when requests wait although enough slices are free in all."""
    last = result["phases"][-1]
    f = last["fragmentation"]
    if not f["waiting_with_enough_free_slices"]:
        return None
    profiles = ", ".join(sorted(last["waiting_by_profile"]))
    return (f"after {last['phase']}, {f['waiting_with_enough_free_slices']} of {f['waiting']} waiting requests "
            f"({profiles}) could not be placed while {f['free_slices']} of {f['total_slices']} memory slices were free "
            f"(no GPU had more than {f['largest_free_on_one_gpu']} free): fragmentation, which the scheduler does not repack")
