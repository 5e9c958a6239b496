"""The run's sign-off summary: verdict, every check with its outcome and evidence.

A first, deliberately plain rendering from ``junit.xml`` and ``evidence.jsonl``:
``summary.json`` for machines, ``signoff.md`` and a self-contained ``signoff.html``
for people. Files are written to a temporary name and renamed, so a reader never
sees half a report; a run that did not finish is marked incomplete.
"""

from __future__ import annotations

import html
import json
import os
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from . import __version__


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_results(report_dir: Path) -> list[dict[str, Any]]:
    """One entry per test case in junit.xml, joined with its evidence records."""
    evidence: dict[str, dict] = {}
    ev_path = report_dir / "evidence.jsonl"
    if ev_path.exists():
        for line in ev_path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                evidence[rec["test"]] = rec
    results = []
    junit = report_dir / "junit.xml"
    if not junit.exists():
        return results
    for case in ET.parse(junit).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (el.get("message") or "").strip()
                break
        nodeid = classname.replace(".", "/") + ".py::" + name
        records = evidence.get(nodeid, {}).get("records", [])
        results.append({
            "suite": classname.split(".")[-1].removeprefix("test_"),
            "test": name,
            "nodeid": nodeid,
            "outcome": outcome,
            "seconds": float(case.get("time", 0) or 0),
            "message": message,
            "evidence": records,
        })
    return results


def write_signoff(
    report_dir: Path, run_id: str, command: list[str], started: float, complete: bool, exit_code: int
) -> Path:
    results = read_results(report_dir)
    counts: dict[str, int] = {}
    for r in results:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    failed = counts.get("failed", 0) + counts.get("error", 0)
    if not complete:
        verdict = "INCOMPLETE"
    elif not results:
        verdict = "NO RESULTS"
    else:
        verdict = "PASS" if failed == 0 else "FAIL"
    summary = {
        "run_id": run_id,
        "harness_version": __version__,
        "command": command,
        "started": started,
        "finished": time.time(),
        "complete": complete,
        "exit_code": exit_code,
        "verdict": verdict,
        "counts": counts,
        "results": results,
    }
    _atomic_write(report_dir / "summary.json", json.dumps(summary, indent=2))
    _atomic_write(report_dir / "signoff.md", _markdown(summary))
    html_path = report_dir / "signoff.html"
    _atomic_write(html_path, _html(summary))
    return html_path


def _markdown(s: dict) -> str:
    lines = [
        f"# DRA sign-off — run {s['run_id']}",
        "",
        f"**Verdict: {s['verdict']}** — " + ", ".join(f"{v} {k}" for k, v in sorted(s["counts"].items())),
        "",
        "| suite | check | outcome | seconds | evidence / reason |",
        "|---|---|---|---|---|",
    ]
    for r in s["results"]:
        detail = r["message"] or "; ".join(json.dumps({k: v for k, v in e.items() if k != "t"}) for e in r["evidence"])
        lines.append(f"| {r['suite']} | {r['test']} | {r['outcome']} | {r['seconds']:.1f} | {detail.replace('|', '/')[:300]} |")
    lines += ["", f"dra-harness {s['harness_version']}; exit code {s['exit_code']}."]
    return "\n".join(lines) + "\n"


def _html(s: dict) -> str:
    color = {"PASS": "#1a7f37", "FAIL": "#cf222e"}.get(s["verdict"], "#9a6700")
    rows = []
    for r in s["results"]:
        detail = r["message"] or "; ".join(json.dumps({k: v for k, v in e.items() if k != "t"}) for e in r["evidence"])
        rows.append(
            f"<tr class='{r['outcome']}'><td>{html.escape(r['suite'])}</td><td>{html.escape(r['test'])}</td>"
            f"<td>{r['outcome']}</td><td>{r['seconds']:.1f}</td><td>{html.escape(detail[:600])}</td></tr>"
        )
    counts = ", ".join(f"{v} {k}" for k, v in sorted(s["counts"].items())) or "no tests"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>DRA sign-off {html.escape(s['run_id'])}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2rem;color:#1f2328}}
#verdict{{font-size:2.5rem;font-weight:700;color:{color}}}
table{{border-collapse:collapse;width:100%}}td,th{{border:1px solid #d0d7de;padding:.3rem .5rem;text-align:left;vertical-align:top}}
tr.failed td,tr.error td{{background:#ffebe9}}tr.skipped td{{color:#57606a}}
</style></head><body>
<h1>DRA sign-off — run {html.escape(s['run_id'])}</h1>
<p id="verdict">Verdict: {s['verdict']}</p><p>{html.escape(counts)}</p>
<table><thead><tr><th>suite</th><th>check</th><th>outcome</th><th>s</th><th>evidence / reason</th></tr></thead>
<tbody>{''.join(rows)}</tbody></table>
<p>dra-harness {html.escape(s['harness_version'])}; exit code {s['exit_code']}.</p>
</body></html>
"""
