"""Which taints keep a device from a request: the slice's own and DeviceTaintRules', against its tolerations.

A tainted device looks, to the scheduler's message, like any other device it could not use
("cannot allocate all claims"), so a pod kept off a device under maintenance read as
``unknown``. These are the allocator's rules (KEP-5055): a taint with effect NoSchedule or
NoExecute excludes the device unless one of the request's tolerations matches it by key,
value (operator Equal, the default) or key alone (Exists), and by effect where it names one.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_harness.checks import cel
from dra_harness.kube.types import Obj

BLOCKING = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str
    source: str  # "slice <name>" or "DeviceTaintRule <name>"

    def __str__(self) -> str:
        return f"{self.key}{'=' + self.value if self.value else ''}:{self.effect} ({self.source})"


def tolerates(toleration: Obj, taint: Taint) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.effect:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.key
    return toleration.get("key") == taint.key and toleration.get("value", "") == taint.value


def _rule_selects(rule: Obj, driver: str, pool: str, device: Obj) -> bool:
    sel = (rule.get("spec") or {}).get("deviceSelector") or {}
    for field, have in (("driver", driver), ("pool", pool), ("device", device.get("name"))):
        if sel.get(field) and sel[field] != have:
            return False
    exprs = [s["cel"]["expression"] for s in sel.get("selectors") or [] if "cel" in s]  # v1alpha3 rules
    return all(cel.evaluate(e, driver, device).matched for e in exprs)


def taints(driver: str, pool: str, slice_name: str, device: Obj, rules: list[Obj]) -> list[Taint]:
    """Every taint on one device: those its slice publishes and those rules put on it."""
    out = [Taint(t.get("key", ""), t.get("value", ""), t.get("effect", ""), f"slice {slice_name}")
           for t in device.get("taints") or []]
    for rule in rules:
        if _rule_selects(rule, driver, pool, device):
            t = (rule.get("spec") or {}).get("taint") or {}
            out.append(Taint(t.get("key", ""), t.get("value", ""), t.get("effect", ""),
                             f"DeviceTaintRule {rule['metadata']['name']}"))
    return out


def blocking(device_taints: list[Taint], request: Obj) -> list[Taint]:
    """The taints that keep ``request`` off the device: blocking effect, no matching toleration."""
    tolerations = request.get("tolerations") or []
    return [t for t in device_taints if t.effect in BLOCKING and not any(tolerates(tol, t) for tol in tolerations)]
