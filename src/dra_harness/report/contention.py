"""The contention design comparison, read from ``<run>/contention/<scenario>-<design>.json``.

The contention suite (its own issue) writes one JSON per scenario x design with wait
percentiles per priority tier, utilisation, idle reserved capacity and a preemption
probe, plus PNG plots beside it; ``contention size`` writes ``<scenario>-sizing.json``
(the nodes each design needs). This module only reads and checks those files; a
file that does not have the agreed shape is reported as unreadable, not guessed at.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dra_harness.kube.types import Obj
from dra_harness.report import readable
from dra_harness.report.reading import read_bytes

REQUIRED = ("scenario", "design", "jobs_total", "jobs_completed", "jobs_lost", "tiers")
TIER_REQUIRED = ("tier", "wait_s")
#: ``contention size``'s answer; no design is named "sizing", so it cannot be a ``<scenario>-<design>.json``.
SIZING_SUFFIX = "-sizing.json"
SIZING_ROW_REQUIRED = ("design", "nodes", "devices")


def _problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return "not a JSON object"
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        return f"missing {', '.join(missing)}"
    if not isinstance(data["tiers"], list):
        return "tiers is not a list"
    for t in data["tiers"]:
        if not isinstance(t, dict) or any(k not in t for k in TIER_REQUIRED) or not isinstance(t["wait_s"], dict):
            return "a tier lacks tier or wait_s"
    return None


def _sizing_problem(data: Any) -> str | None:
    if not isinstance(data, dict) or not isinstance(data.get("scenario"), str) or not isinstance(data.get("rows"), list):
        return "not a sizing result (scenario and rows)"
    if any(not isinstance(r, dict) or any(k not in r for k in SIZING_ROW_REQUIRED) for r in data["rows"]):
        return f"a sizing row lacks {' or '.join(SIZING_ROW_REQUIRED)}"
    return None


def load(run_dir: Path) -> Obj:
    """{"results": [...], "sizing": [...], "unreadable": [{"file", "problem"}]} ; empty results = contention not run."""
    results, sizing, unreadable = [], [], []
    folder = run_dir / "contention"
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        text = read_bytes(path, "record")  # a link (to /dev/zero), a FIFO or a huge file is refused, never read
        try:
            data = json.loads(text)
        except ValueError as e:
            unreadable.append({"file": f"contention/{path.name}", "problem": f"not JSON: {e}"})
            continue
        if path.name.endswith(SIZING_SUFFIX):
            problem = _sizing_problem(data)
            if problem:
                unreadable.append({"file": f"contention/{path.name}", "problem": problem})
            else:
                sizing.append(data | {"_file": f"contention/{path.name}"})
            continue
        if isinstance(data, dict) and "scenario" not in data and "tiers" not in data:
            continue  # an auxiliary file beside the results (e.g. <scenario>-<design>-raw.json)
        problem = _problem(data)
        if problem:
            unreadable.append({"file": f"contention/{path.name}", "problem": problem})
            continue
        data["_file"] = f"contention/{path.name}"
        plots = data.get("plots") or {}
        data["_plots"] = {k: folder / v for k, v in plots.items() if isinstance(v, str) and (folder / Path(v).name).is_file()
                          and Path(v).name == v}
        results.append(data)
    raw = {r.get("raw") for r in results}
    return {"results": results, "sizing": sizing, "unreadable": [u for u in unreadable if Path(u["file"]).name not in raw]}


def wait_table(results: list[Obj]) -> list[Obj]:
    rows = []
    for r in results:
        for t in r["tiers"]:
            w = t.get("wait_s") or {}
            rows.append({
                "scenario": r["scenario"], "design": r["design"], "tier": t["tier"], "priority": t.get("priority"),
                "jobs": t.get("jobs"), "p50": w.get("p50"), "p95": w.get("p95"), "p99": w.get("p99"), "max": w.get("max"),
                "tolerable": t.get("tolerable_wait_s"), "over": t.get("over_tolerable"), "verdict": t.get("verdict"),
            })
    return rows


def preemption_verdict(probe: Obj | None) -> str:
    if not probe:
        return "preemption probe not run"
    wait = probe.get("high_priority_wait_s")
    waited = "never started within the probe" if wait is None else f"waited {wait:.1f} s"
    if probe.get("freed_by_preemption"):
        return f"a device WAS freed by preemption for the high-priority job ({waited})"
    return f"no device was freed by preemption: the high-priority job {waited}"


def _wait(v: Any) -> str:
    return readable.duration(v) if isinstance(v, (int, float)) else str(v)


def findings(results: list[Obj]) -> list[Obj]:
    out = []
    for r in results:
        where = f"{r['scenario']} / {r['design']}"
        if r.get("jobs_lost"):
            out.append({"severity": "failure", "concern": "contention", "test": r["_file"],
                        "message": f"{where}: {r['jobs_lost']} jobs lost"})
        for t in r["tiers"]:
            if t.get("verdict") == "misses":
                out.append({"severity": "finding", "concern": "contention", "test": r["_file"],
                            "message": f"{where}: tier {t['tier']} misses its tolerable wait "
                                       f"(p95 {_wait(t['wait_s'].get('p95'))} > {_wait(t.get('tolerable_wait_s'))} "
                                       f"of scenario time; "
                                       f"{t.get('over_tolerable')} jobs over)"})
    return out


def measurements(results: list[Obj]) -> list[Obj]:
    """Wait percentiles per scenario/design/tier, for the diff."""
    out = []
    for r in results:
        for t in r["tiers"]:
            for q in ("p50", "p95", "p99", "max"):
                v = (t.get("wait_s") or {}).get(q)
                if isinstance(v, (int, float)):
                    out.append({"key": f"contention::{r['scenario']}::{r['design']}::{t['tier']}::wait_{q}",
                                "test": r["_file"], "name": f"wait_{q}", "value": float(v), "unit": "s", "kind": "wait"})
        probe = r.get("preemption_probe") or {}
        if isinstance(probe.get("high_priority_wait_s"), (int, float)):
            out.append({"key": f"contention::{r['scenario']}::{r['design']}::preemption_high_priority_wait",
                        "test": r["_file"], "name": "high_priority_wait_s", "value": float(probe["high_priority_wait_s"]),
                        "unit": "s", "kind": "wait"})
    return out
