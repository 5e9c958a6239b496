"""The design record: what the user meant to build, compared point by point with what the run saw.

The seed guidance asks a team to decide a sharing mode, a tenant boundary, a pool
design and, per workload class, the wait it can tolerate — before buying. The user
writes those decisions in a small YAML file (``--design-file``; example in
``fixtures/designs/example.yaml``), validated here with jsonschema; the report then
says for each point whether the run is consistent with it, contradicts it, or could
not establish it.
"""

from __future__ import annotations

from pathlib import Path

from dra_harness import yamlfile
from dra_harness.errors import InputError
from dra_harness.kube.types import Obj
from dra_harness.report import readable

SHARING_MODES = ["exclusive", "shared-claim", "time-slicing", "mps", "partitioned"]
POOL_DESIGNS = ["shared", "reserved", "pools", "queue"]

DESIGN_SCHEMA: Obj = {
    "type": "object",
    "required": ["name", "sharingMode", "tenantBoundary", "poolDesign", "workloadClasses"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "description": {"type": "string"},
        "sharingMode": {"enum": SHARING_MODES},
        "tenantBoundary": {
            "type": "object",
            "required": ["kind"],
            "additionalProperties": False,
            "properties": {"kind": {"enum": ["namespace", "label", "none"]}, "label": {"type": "string", "minLength": 1}},
        },
        "poolDesign": {
            "type": "object",
            "required": ["kind"],
            "additionalProperties": False,
            "properties": {
                "kind": {"enum": POOL_DESIGNS},
                "reservedDevices": {"type": "integer", "minimum": 0},
                "forClass": {"type": "string"},
            },
        },
        "workloadClasses": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "priority", "tolerableWait"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "priority": {"type": "integer"},
                    "devicesPerJob": {"type": "integer", "minimum": 1},
                    "tolerableWait": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(ms|s|m|h)$"},
                },
            },
        },
        "expect": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "deviceTaints": {"type": "boolean"},
                "preemptionFreesDevices": {"type": "boolean"},
            },
        },
    },
}


class DesignFileError(InputError):
    """The design file is unreadable or invalid; the message is one line."""


def load_design(path: Path | str) -> Obj:
    data = yamlfile.load(path, DesignFileError, f"design file {path}")
    yamlfile.validate(data, DESIGN_SCHEMA, DesignFileError, f"design file {path}")
    names = [c["name"] for c in data["workloadClasses"]]
    if len(set(names)) != len(names):
        raise DesignFileError(f"design file {path}: workloadClasses: a class name appears twice")
    return data


# -- comparison ---------------------------------------------------------------------
CONSISTENT, CONTRADICTED, UNKNOWN = "consistent", "contradicted", "not established"


def _outcome(results: list[Obj], fragment: str) -> str | None:
    """The outcome of the first test whose name contains ``fragment`` (None: not run)."""
    for r in results:
        if fragment in r["test"]:
            return r["outcome"]
    return None


def _point(point: str, designed: str, observed: str, status: str, evidence: list[str]) -> Obj:
    return {"point": point, "designed": designed, "observed": observed, "status": status, "evidence": evidence}


def compare(design: Obj, results: list[Obj], contention: list[Obj], fingerprint: Obj) -> list[Obj]:
    points = [_sharing(design, results), _tenant(design, results)]
    points += _pools(design, contention)
    expect = design.get("expect") or {}
    if "deviceTaints" in expect:
        points.append(_taints(expect["deviceTaints"], results, fingerprint))
    if "preemptionFreesDevices" in expect:
        points.append(_preemption(expect["preemptionFreesDevices"], contention))
    return points


def _sharing(design: Obj, results: list[Obj]) -> Obj:
    mode = design["sharingMode"]
    if mode == "exclusive":
        o = _outcome(results, "templates_never_share")
        status = {"passed": CONSISTENT, "failed": CONTRADICTED, "error": CONTRADICTED}.get(o or "", UNKNOWN)
        return _point("sharing mode", mode, f"pods from claim templates never shared a device: {o or 'not run'}",
                      status, ["sharing: pods using templates never share a device"])
    if mode == "shared-claim":
        o = _outcome(results, "sharing_a_claim_see_the_same_device")
        status = {"passed": CONSISTENT, "failed": CONTRADICTED, "error": CONTRADICTED}.get(o or "", UNKNOWN)
        return _point("sharing mode", mode, f"pods sharing one claim got one device: {o or 'not run'}", status,
                      ["sharing: pods sharing a claim see the same device on its node"])
    o = _outcome(results, "containers_see_exactly")
    status = CONSISTENT if o == "passed" else CONTRADICTED if o in ("failed", "error") else UNKNOWN
    return _point("sharing mode", mode,
                  f"in-container check: {o or 'not run'} ({mode} is enforced by the driver on the node; "
                  "simulated nodes cannot show it)", status, ["sharing: containers see exactly their allocated devices"])


def _tenant(design: Obj, results: list[Obj]) -> Obj:
    kind = design["tenantBoundary"]["kind"]
    audit = next((r for r in results if "no_existing_claim_is_shared_across_tenants" in r["test"]), None)
    if kind == "none":
        return _point("tenant boundary", "none", "no boundary designed; nothing to check", CONSISTENT, [])
    if audit is None:
        return _point("tenant boundary", kind, "tenant audit not run", UNKNOWN, [])
    found = [f for rec in audit["evidence"] for f in rec.get("findings") or []]
    label = design["tenantBoundary"].get("label", "tenant")
    if kind == "namespace":
        observed = "ResourceClaims are namespaced, so a claim is only usable inside its namespace; "
    else:
        observed = f"claims audited by pod label {label!r}: "
    observed += f"audit {audit['outcome']}, {len(found)} claims shared across tenants"
    status = CONTRADICTED if found or audit["outcome"] in ("failed", "error") else CONSISTENT if audit["outcome"] == "passed" else UNKNOWN
    return _point("tenant boundary", kind + (f" ({label})" if kind == "label" else ""), observed, status,
                  ["sharing: no existing claim is shared across tenants"])


def _pools(design: Obj, contention: list[Obj]) -> list[Obj]:
    kind = design["poolDesign"]["kind"]
    mine = [c for c in contention if c["design"] == kind]
    points = []
    if not contention:
        points.append(_point("pool design", kind, "contention not run", UNKNOWN, []))
    elif not mine:
        points.append(_point("pool design", kind, f"contention ran designs {sorted({c['design'] for c in contention})}, not {kind}",
                             UNKNOWN, [c["_file"] for c in contention]))
    else:
        lost = sum(c.get("jobs_lost") or 0 for c in mine)
        points.append(_point("pool design", kind, f"{len(mine)} scenario(s) ran under {kind}; {lost} jobs lost",
                             CONTRADICTED if lost else CONSISTENT, [c["_file"] for c in mine]))
    for cls in design["workloadClasses"]:
        tolerable = yamlfile.seconds(cls["tolerableWait"])
        tiers = [(c, t) for c in mine for t in c["tiers"] if t["tier"] == cls["name"]]
        designed = f"{cls['name']} (priority {cls['priority']}) waits at most {cls['tolerableWait']}"
        if not tiers:
            points.append(_point(f"class {cls['name']}", designed, "not measured under this design", UNKNOWN, []))
            continue
        # Waits are scenario seconds (wall seconds x time_compression): the unit of the design's waits.
        worst = max(tiers, key=lambda ct: ct[1]["wait_s"].get("p95") or 0)
        p95 = worst[1]["wait_s"].get("p95")
        observed = f"p95 wait {p95:.0f} s in {worst[0]['scenario']}" if isinstance(p95, (int, float)) else "no p95 recorded"
        status = UNKNOWN if not isinstance(p95, (int, float)) else CONSISTENT if p95 <= tolerable else CONTRADICTED
        points.append(_point(f"class {cls['name']}", designed, observed, status, [worst[0]["_file"]]))
    return points


def _taints(expected: bool, results: list[Obj], fingerprint: Obj) -> Obj:
    rows = [r for r in results if r["suite"] == "device_taints"]
    served = (fingerprint.get("resource_api") or {}).get("device_taint_rules")
    if not rows:
        observed, works = f"device taint suite not run; DeviceTaintRule served in {served or 'no version'}", None
    elif all(r["outcome"] == "skipped" for r in rows):
        observed, works = "device taint suite skipped: " + (rows[0]["message"] or "unsupported"), False
    else:
        works = all(r["outcome"] == "passed" for r in rows if r["outcome"] != "skipped")
        observed = f"device taints: {sum(r['outcome'] == 'passed' for r in rows)}/{len(rows)} checks passed (served in {served})"
    status = UNKNOWN if works is None else CONSISTENT if works == expected else CONTRADICTED
    return _point("device taints", "relied on" if expected else "not relied on", observed, status, ["device taints suite"])


def _preemption(expected: bool, contention: list[Obj]) -> Obj:
    probes = [c["preemption_probe"] for c in contention if c.get("preemption_probe")]
    if not probes:
        return _point("preemption", f"frees devices: {expected}", "preemption probe not run", UNKNOWN, [])
    freed = any(p.get("freed_by_preemption") for p in probes)
    return _point("preemption", f"frees devices: {expected}",
                  f"freed by preemption: {freed}; scheduler: {probes[0].get('scheduler_message', '')[:200]}",
                  CONSISTENT if freed == expected else CONTRADICTED,
                  [c["_file"] for c in contention if c.get("preemption_probe")])


# -- sizing -------------------------------------------------------------------------
def sizing_rows(sizing: list[Obj]) -> list[Obj]:
    """One row per scenario x design of ``contention size``'s answers (``<scenario>-sizing.json``): what to buy
    to meet every tier, and what one node fewer would cost. Shown with the design record whether or not a
    design file was given: it is the number the record's pool design is bought at."""
    rows = []
    for doc in sizing:
        shape = doc.get("hardware") or {}
        for r in doc["rows"]:
            below = r.get("one_smaller") or None
            tiers = "; ".join(f"{t['tier']} p95 {readable.duration(t.get('p95_s'))} (tolerable {readable.duration(t.get('tolerable_wait_s'))})"
                              for t in r.get("tiers") or [])
            rows.append({
                "scenario": doc["scenario"], "design": r["design"], "nodes": r["nodes"], "devices": r["devices"],
                "answer": r.get("answer") or ("—" if r["nodes"] is None else f"{r['nodes']} nodes"),
                "node": ", ".join(str(x) for x in (shape.get("model"), f"{r.get('devices_per_node')} devices per node") if x),
                "tiers": tiers or "—",
                "one_smaller": "—" if not below else (
                    f"{below['nodes']} nodes: {', '.join(below.get('tiers_over') or []) or 'no tier'} over, "
                    f"{below.get('jobs_over', 0)} jobs over" + (f", {below['jobs_lost']} lost" if below.get("jobs_lost") else "")),
                "monotone": r.get("monotone", True), "runs": r.get("runs"), "file": doc["_file"],
            })
    return rows
