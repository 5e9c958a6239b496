"""Render a summary as ``signoff.html`` (one self-contained file) and ``signoff.md``.

Templates are jinja2 with autoescaping on: test messages and scheduler events are
untrusted text. Plots are embedded as data URIs; links to evidence are relative to
the run directory (``failures/*.json``, ``contention/*.json``), so the file works
both opened in place and mailed on its own (then only those links are dead).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jinja2

from dra_harness.kube.types import Obj
# operations: imported for the sections it registers.
from dra_harness.report import contention, design, operations, plots, readable, sections  # noqa: F401
from dra_harness.report.results import slug

VERDICT_COLOURS = {"PASS": "#1a7f37", "FAIL": "#cf222e", "PARTIAL": "#9a6700", "INCOMPLETE": "#9a6700", "NO RESULTS": "#9a6700"}
OUTCOME_COLOURS = {"passed": "#1a7f37", "failed": "#cf222e", "error": "#cf222e", "skipped": "#6e7781", "not run": "#6e7781",
                   "not established": "#9a6700"}
CONFORMANCE_COLOURS = {"met": "#1a7f37", "not met": "#cf222e", "not established": "#9a6700"}

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("dra_harness.report", "templates"),
    autoescape=jinja2.select_autoescape(["html.j2"], default_for_string=False),
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.ChainableUndefined,
)


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts)) if ts else "—"


def _detail(record: Obj) -> str:
    return json.dumps({k: v for k, v in record.items() if k != "t"}, default=str)


def _num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return "—" if v is None else str(v)


_env.filters.update(when=_when, detail=_detail, num=_num, duration=readable.duration, items=readable.items,
                    anchor=lambda nodeid: "t-" + slug(nodeid),
                    cell=lambda text: " ".join(str(text).replace("|", "/").split()),
                    tojson_pretty=lambda o: json.dumps(o, indent=2, default=str))


def _context(summary: Obj, run_dir: Path | None, with_plots: bool = True) -> Obj:
    rows = contention.wait_table(summary["contention"]["results"])
    images: list[Obj] = []
    for scenario in dict.fromkeys(r["scenario"] for r in rows) if with_plots else ():
        png = plots.design_comparison(rows, scenario)
        if png:
            images.append({"title": f"{scenario}: designs compared", "uri": plots.data_uri(png)})
    for c in summary["contention"]["results"] if with_plots else ():
        for kind, name in (c.get("plots") or {}).items():
            uri = plots.file_uri(run_dir / "contention" / Path(name).name) if run_dir else None
            if uri:
                images.append({"title": f"{c['scenario']} / {c['design']}: {kind.replace('_', ' ')}", "uri": uri})
    sizing = summary["contention"].get("sizing") or []  # absent from a summary written before `contention size`
    sizing_images = []
    for doc in sizing if with_plots else ():
        uri = plots.file_uri(run_dir / "contention" / Path(doc["plot"]).name) if run_dir and isinstance(doc.get("plot"), str) else None
        if uri:
            sizing_images.append({"title": f"{doc['scenario']}: devices needed per design", "uri": uri})
    durations = plots.durations(summary["results"]) if with_plots else None
    fp = summary["fingerprint"]
    comparison = (summary.get("design") or {}).get("comparison") or []
    return {
        "s": summary,
        "fp": fp,
        "colour": VERDICT_COLOURS.get(summary["verdict"], "#9a6700"),
        "outcome_colours": OUTCOME_COLOURS,
        "conformance_colours": CONFORMANCE_COLOURS,
        "wait_rows": rows,
        "sizing_rows": design.sizing_rows(sizing),
        "sizing_images": sizing_images,
        "preemption": [
            {"scenario": c["scenario"], "design": c["design"], "verdict": contention.preemption_verdict(c.get("preemption_probe")),
             "message": (c.get("preemption_probe") or {}).get("scheduler_message", "")}
            for c in summary["contention"]["results"]
        ],
        "images": images,
        "durations_uri": plots.data_uri(durations) if durations else None,
        "contradictions": sum(p["status"] == "contradicted" for p in comparison),
        "by_concern": {c["id"]: [r for r in summary["results"] if r["concern"] == c["id"]] for c in summary["concerns"]},
        "titles": {c["id"]: c["title"] for c in summary["concerns"]},
        "sections": sections.rendered(summary),
        "devices": sum(d.get("devices", 0) for d in (fp.get("inventory") or {}).values() if isinstance(d, dict)),
    }


def html(summary: Obj, run_dir: Path | None = None) -> str:
    return _env.get_template("signoff.html.j2").render(**_context(summary, run_dir))


def markdown(summary: Obj) -> str:
    ctx = _context(summary, None, with_plots=False)
    return _env.get_template("signoff.md.j2").render(**ctx)


def compare_html(table: Obj) -> str:
    """Several runs side by side (:mod:`.compare`), one self-contained file."""
    return _env.get_template("compare.html.j2").render(t=table, outcome_colours=OUTCOME_COLOURS, verdict_colours=VERDICT_COLOURS)


def compare_markdown(table: Obj) -> str:
    return _env.get_template("compare.md.j2").render(t=table)
