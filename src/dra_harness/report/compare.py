"""Several runs side by side: drivers, versions, clusters or designs compared check by check.

Where ``diff`` gates one candidate against one base, ``compare`` only shows: for N runs
(directories or summary.json, loaded and matched as ``diff`` does) a provenance row and the
runs' fingerprints on top, then per concern and check each run's outcome and the figures
its test recorded (timings in ms/s/min/h by magnitude, counts), then each contention
scenario/design/tier's p95 wait and verdict, and each design's size needed (``contention size``:
nodes and devices). A row *differs* when the outcomes differ (a
check absent from a run included) or a figure's spread across the runs exceeds both
thresholds (relative and absolute, so noise on a 0.2 s timing is not a difference); the
renderers highlight those rows. Then each conformance requirement's verdict per run, with where its
checks ran and whose devices they held: an example-driver run beside a vendor's shows what differs
by vendor. Nothing here fails: there is no verdict across runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dra_harness import yamlfile
from dra_harness.kube.types import Obj
from dra_harness.report import readable, render
from dra_harness.report.diff import Thresholds, contention_runs, k8s_version, load, matched_checks
from dra_harness.report.files import RunDirError, atomic_write
from dra_harness.report.results import concern_titles, figures, human

#: A timing differs when its spread across the runs is over 25 % AND over 0.5 s; a wait, over 25 % and 60 scenario seconds.
THRESHOLDS = Thresholds(max_slowdown=0.25, min_delta_s=0.5, max_wait_increase=0.25, min_wait_delta_s=60.0)
#: Evidence lines shown per cell (the rest are in the run's own report).
EVIDENCE_LINES = 4

_STR = {"type": "string"}
#: What ``compare`` reads beyond what ``diff`` checks; all of it optional (older runs have none of it).
EXTRA_SCHEMA: Obj = {
    "type": "object",
    "properties": {
        "provenance": {"type": ["object", "null"], "properties": {"sentence": _STR, "drivers": {"type": "array", "items": {
            "type": "object", "properties": {"name": _STR, "source": _STR}}}}},
        "results": {"type": "array", "items": {"type": "object", "properties": {
            "concern": _STR, "test": _STR,
            "provenance": {"type": ["object", "null"], "properties": {"text": _STR}},
            "evidence_text": {"type": ["array", "null"], "items": _STR},
        }}},
        "conformance": {"type": ["object", "null"], "properties": {"rows": {"type": "array", "items": {
            "type": "object", "required": ["id", "state"], "properties": {"id": _STR, "state": _STR, "title": _STR, "level": _STR}}}}},
        "contention": {"type": ["object", "null"], "properties": {"sizing": {"type": "array", "items": {
            "type": "object", "required": ["scenario", "rows"], "properties": {"scenario": _STR, "rows": {"type": "array", "items": {
                "type": "object", "required": ["design", "nodes", "devices"],
                "properties": {"design": _STR, "nodes": {"type": ["integer", "null"]}, "devices": {"type": ["integer", "null"]}}}}}}}}},
    },
}


def load_runs(paths: list[Path]) -> list[Obj]:
    """Each run's summary, as ``diff`` loads it; a malformed one is one line naming it."""
    out = []
    for path in paths:
        summary = load(path)
        yamlfile.validate(summary, EXTRA_SCHEMA, RunDirError, f"summary of {path}")
        out.append(summary)
    return out


def _sig(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _number(v: Any) -> str:
    return _sig(v) if isinstance(v, float) else str(v)


def evidence_lines(row: Obj) -> list[str]:
    """Readable evidence: the run's own sentences (``evidence_text``) when it has them, else each record in the
    same words (:func:`readable.sentence`) without its top-level numbers, which are the figures shown beside it."""
    if row.get("evidence_text"):
        return [str(x) for x in row["evidence_text"]]
    lines = []
    for rec in row.get("evidence") or []:
        rest = {k: v for k, v in rec.items() if k != "t" and (isinstance(v, bool) or not isinstance(v, (int, float)))}
        if rest:
            lines.append(readable.sentence(rest))
    return lines


def _differs(values: list[float], rel: float, absolute: float) -> bool:
    """Whether the spread of ``values`` is over both limits."""
    lo, hi = min(values), max(values)
    return hi - lo > absolute and (lo <= 0 or (hi - lo) / lo > rel)


def _label(key: str) -> str:
    name, _, n = key.partition("#")
    text = "took" if name == "seconds" else name.removesuffix("_s").replace("_", " ")
    return f"{text} ({int(n) + 1})" if n else text


def _check_row(nodeid: str, rows: list[Obj | None], t: Thresholds) -> Obj:
    figs = [{f["key"]: f for f in figures(r.get("evidence") or [])} if r else {} for r in rows]
    keys = dict.fromkeys(k for f in figs for k in f)
    changed = set()
    for key in keys:
        present = [f[key] for f in figs if key in f]
        # Recorded in only some of the runs that ran the check; timings over both limits; counts at all; other numbers by 25 %.
        rel, absolute = ((t.max_slowdown, t.min_delta_s) if present[0]["timing"] else
                         (0.0, 0.0) if isinstance(present[0]["value"], int) else (t.max_slowdown, 0.0))
        if len(present) < sum(r is not None for r in rows) or _differs([f["value"] for f in present], rel, absolute):
            changed.add(key)
    largest = {k: max(abs(f[k]["value"]) for f in figs if k in f) for k in keys}
    outcomes = {r["outcome"] if r else "absent" for r in rows}
    cells: list[Obj | None] = []
    for r, f in zip(rows, figs, strict=True):
        if r is None:
            cells.append(None)
            continue
        message = (r.get("message") or "").strip()
        cells.append({
            "outcome": r["outcome"],
            "message": message.splitlines()[0][:200] if message and r["outcome"] != "passed" else "",
            "figures": [{"label": _label(k), "differs": k in changed,
                         "text": readable.duration(x["value"], largest[k]) if x["timing"] else _number(x["value"])} for k, x in f.items()],
            "evidence": evidence_lines(r)[:EVIDENCE_LINES],
            "provenance": (r.get("provenance") or {}).get("text"),
        })
    test = next(r.get("test") for r in rows if r) or nodeid.rpartition("::")[2]
    return {"check": human(test), "nodeid": nodeid, "outcomes_differ": len(outcomes) > 1,
            "differs": len(outcomes) > 1 or bool(changed), "cells": cells}


def _concerns(summaries: list[Obj], t: Thresholds) -> list[Obj]:
    by_concern: dict[str, list[Obj]] = {}
    for nodeid, rows in matched_checks(summaries):
        concern = next(r.get("concern") for r in rows if r) or "harness"
        by_concern.setdefault(concern, []).append(_check_row(nodeid, rows, t))
    titles = concern_titles([r for s in summaries for r in s.get("results") or []])
    order = [cid for cid in titles if cid in by_concern] + sorted(set(by_concern) - set(titles))
    return [{"id": cid, "title": titles.get(cid, cid), "rows": by_concern[cid],
             "differs": sum(r["differs"] for r in by_concern[cid])} for cid in order]


def _contention(summaries: list[Obj], t: Thresholds) -> list[Obj]:
    runs = [contention_runs(s) for s in summaries]
    out = []
    for scenario, design in dict.fromkeys(k for r in runs for k in r):
        these = [r.get((scenario, design)) for r in runs]
        lost = [None if c is None else c.get("jobs_lost") or 0 for c in these]
        out.append({"scenario": scenario, "design": design, "tier": "jobs lost", "differs": len(set(lost)) > 1,
                    "cells": [None if c is None else {"text": str(n), "verdict": ""} for c, n in zip(these, lost, strict=True)]})
        tiers = [{x["tier"]: x for x in c["tiers"]} if c else {} for c in these]
        for tier in dict.fromkeys(name for ts in tiers for name in ts):
            p95 = [((ts.get(tier) or {}).get("wait_s") or {}).get("p95") for ts in tiers]
            p95s = [float(v) for v in p95 if isinstance(v, (int, float))]
            cells: list[Obj | None] = [
                None if tier not in ts else {"text": readable.duration(v, max(p95s)) if isinstance(v, (int, float)) else "—",
                                             "verdict": ts[tier].get("verdict") or "not judged"}
                for ts, v in zip(tiers, p95, strict=True)]
            verdicts = {c["verdict"] if c else "absent" for c in cells}
            waits = len(p95s) > 1 and _differs(p95s, t.max_wait_increase, t.min_wait_delta_s)
            out.append({"scenario": scenario, "design": design, "tier": tier, "differs": len(verdicts) > 1 or waits, "cells": cells})
    return out + _sizing(summaries)


def _sizing(summaries: list[Obj]) -> list[Obj]:
    """One row per scenario/design that any run sized: nodes / devices needed; differs when they (or presence) differ."""
    sized = [{(doc["scenario"], r["design"]): r for doc in (s.get("contention") or {}).get("sizing") or [] for r in doc["rows"]}
             for s in summaries]
    out = []
    for scenario, design in dict.fromkeys(k for z in sized for k in z):
        texts = [None if (r := z.get((scenario, design))) is None else
                 f"{r['nodes']} nodes / {r['devices']} devices" if r["nodes"] is not None else str(r.get("answer") or "not met")
                 for z in sized]
        out.append({"scenario": scenario, "design": design, "tier": "size needed", "differs": len(set(texts)) > 1,
                    "cells": [None if x is None else {"text": x, "verdict": ""} for x in texts]})
    return out


def _conformance(summaries: list[Obj]) -> list[Obj]:
    """Per requirement any run judged: each run's verdict (None: the run's summary has no such row); differs when they do."""
    by_run = [{r["id"]: r for r in (s.get("conformance") or {}).get("rows") or []} for s in summaries]
    out = []
    for rid in dict.fromkeys(k for z in by_run for k in z):
        first = next(z[rid] for z in by_run if rid in z)
        cells = [None if rid not in z else {"state": z[rid]["state"], "reason": z[rid].get("reason", ""),
                                            "where": z[rid].get("provenance", ""), "drivers": z[rid].get("drivers", "")}
                 for z in by_run]
        out.append({"id": rid, "title": first.get("title", rid), "level": first.get("level", ""),
                    "differs": len({c["state"] if c else None for c in cells}) > 1, "cells": cells})
    return out


def _drivers(s: Obj) -> str:
    source = {d.get("name"): d.get("source") for d in (s.get("provenance") or {}).get("drivers") or []}
    out = []
    for d in (s.get("fingerprint") or {}).get("drivers") or []:
        text = d["name"] + (f" {', '.join(map(str, d['published_versions']))}" if d.get("published_versions") else "")
        text += f", build {d['build']}" if d.get("build") else ""
        out.append(text + (f" ({source[d['name']]})" if source.get(d["name"]) else ""))
    return "; ".join(out) or "none seen"


def _gates(s: Obj) -> str:
    g = (s.get("fingerprint") or {}).get("feature_gates") or {}
    return f"{len(g.get('enabled') or [])} on" if g.get("status") == "read" else "unknown"


def _devices(s: Obj) -> str:
    inv = (s.get("fingerprint") or {}).get("inventory") or {}
    return str(sum(d.get("devices", 0) for d in inv.values() if isinstance(d, dict))) if isinstance(inv, dict) and inv else "unknown"


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts)) if ts else "—"


#: The header's rows: (name, value of a summary, whether a difference is highlighted).
_HEADER: tuple[tuple[str, Callable[[Obj], str], bool], ...] = (
    ("provenance", lambda s: (s.get("provenance") or {}).get("sentence") or "not recorded in this run", True),
    ("run", lambda s: str(s.get("run_id", "?")), False),
    ("Kubernetes", k8s_version, True),
    ("provider", lambda s: str((s.get("fingerprint") or {}).get("provider", "unknown")), True),
    ("drivers", _drivers, True),
    ("DRA feature gates", _gates, True),
    ("devices", _devices, True),
    ("verdict", lambda s: str(s.get("verdict", "?")), True),
    ("checks", lambda s: ", ".join(f"{v} {k}" for k, v in sorted((s.get("counts") or {}).items())) or "none ran", True),
    ("findings", lambda s: str(len(s.get("findings") or [])), True),
    ("started", lambda s: _when(s.get("started")), False),
)


def labels(summaries: list[Obj], given: list[str] | None = None) -> list[str]:
    """Each run's column title: ``given`` (one per run), else its run id; repeats get ``#2``, ``#3``."""
    raw = list(given) if given else [str(s.get("run_id") or f"run {i + 1}") for i, s in enumerate(summaries)]
    out: list[str] = []
    for name in raw:
        n, label = 1, name
        while label in out:
            n += 1
            label = f"{name} #{n}"
        out.append(label)
    return out


def build(summaries: list[Obj], names: list[str] | None = None, t: Thresholds = THRESHOLDS) -> Obj:
    """The comparison table the renderers draw (``names``: one column title per run)."""
    header = []
    for name, value, compared in _HEADER:
        values = [value(s) for s in summaries]
        header.append({"name": name, "by_run": values, "differs": compared and len(set(values)) > 1})
    concerns = _concerns(summaries, t)
    rows = [r for c in concerns for r in c["rows"]]
    return {
        "runs": [{"label": label, "run_id": s.get("run_id"), "verdict": s.get("verdict"), "kubernetes": k8s_version(s)}
                 for label, s in zip(labels(summaries, names), summaries, strict=True)],
        "header": header, "concerns": concerns, "contention": _contention(summaries, t), "conformance": _conformance(summaries),
        "checks": len(rows), "differ": sum(r["differs"] for r in rows),
        "thresholds": {"timing": f"over {t.max_slowdown:.0%} and over {readable.duration(t.min_delta_s)}",
                       "wait": f"over {t.max_wait_increase:.0%} and over {readable.duration(t.min_wait_delta_s)}"},
    }


def write(out_dir: Path, table: Obj) -> Path:
    """compare.html and compare.md in ``out_dir``; return compare.html."""
    if out_dir.exists() and not out_dir.is_dir():
        raise RunDirError(f"{out_dir} is not a directory")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(out_dir / "compare.md", render.compare_markdown(table))
        atomic_write(out_dir / "compare.html", render.compare_html(table))
    except OSError as e:
        raise RunDirError(f"{out_dir}: cannot write the comparison: {e.strerror or e}") from None
    return out_dir / "compare.html"
