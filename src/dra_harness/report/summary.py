"""The run directory's machine-readable whole (``summary.json``) and the writing of every report file.

Everything is derived from files in the run directory — ``run.json`` (how the run
went), ``fingerprint.json``, ``design.json``, ``junit.xml``, ``evidence.jsonl``,
``contention/`` — so ``dra-harness report RUN_DIR`` re-renders a run exactly, and a run
that was killed still renders, marked incomplete. Each file is read through
:mod:`.reading` (never through a link, never from a FIFO, never past its kind's cap),
and rendering writes only into a directory a run marked (:mod:`.rundir`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from dra_harness import __version__, yamlfile
from dra_harness.kube.types import Obj
from dra_harness.checks import preflight
from dra_harness.report import (allocations, allure_extra, conformance_evidence, contention, design, pdf, provenance, readable, render,
                                results, rundir, upgrade, vendor)
from dra_harness.report.files import RunDirError, atomic_write, redact_files, write_json
from dra_harness.report.reading import load_json, present

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
#: Allocation rows the report lists (the run may have many more; all are in allocations.jsonl).
ALLOCATION_ROWS_SHOWN = 300

__all__ = ["RunDirError", "build_summary", "finish_run", "newer_than_summary", "start_run", "write_pdf", "write_report"]


def start_run(run_dir: Path, run_id: str, command: list[str], design_record: Obj | None) -> Path:
    """Claim the directory, record the start and write a report marked incomplete at once: a killed run still leaves one.

    A directory the run may not write into raises :class:`RunDirError` before anything is written.
    """
    from dra_harness.report.fingerprint import redacted_command

    rundir.claim(run_dir, run_id)
    write_json(run_dir / "run.json", {
        "run_id": run_id, "command": redacted_command(command), "started": time.time(),
        "finished": None, "complete": False, "exit_code": None,
    })
    if design_record is not None:
        write_json(run_dir / "design.json", design_record)
    rundir.record(run_dir, [p for p in (run_dir / "run.json", run_dir / "design.json") if p.exists()])
    return write_report(run_dir)


def finish_run(run_dir: Path, complete: bool, exit_code: int) -> Path:
    """Record the end and rewrite the report; the marker then lists every file the run wrote."""
    meta = _run_meta(run_dir)
    meta.update(finished=time.time(), complete=complete, exit_code=exit_code)
    write_json(run_dir / "run.json", meta)
    path = write_report(run_dir)
    if pdf.browser():
        write_pdf(run_dir)
    else:
        log.info("no signoff.pdf: Chromium is not installed (`dra-harness report %s --pdf` installs it as root)", run_dir)
    rundir.seal(run_dir)
    return path


def write_pdf(run_dir: Path) -> Path | None:
    """Print signoff.html to signoff.pdf; a browser that fails is a warning, never a failed run."""
    try:
        printed = pdf.print_pdf(run_dir / "signoff.html")
    except pdf.PdfError as e:
        log.warning("%s", e)
        return None
    rundir.record(run_dir, [printed])
    return printed


_STRS: Obj = {"type": "array", "items": {"type": "string"}}
_MAP: Obj = {"type": ["object", "null"]}

#: What ``dra-harness run`` writes to run.json; a hand-edited or foreign one fails in one line naming the field.
RUN_SCHEMA: Obj = {
    "type": "object",
    "properties": {
        "run_id": {"type": "string"}, "command": _STRS, "started": {"type": ["number", "null"]},
        "finished": {"type": ["number", "null"]}, "complete": {"type": "boolean"}, "exit_code": {"type": ["integer", "null"]},
    },
}

#: The parts of fingerprint.json that the report and the diff read, with their types.
FINGERPRINT_SCHEMA: Obj = {
    "type": "object",
    "properties": {
        "provider": {"type": "string"},
        "command": _STRS,
        "kubernetes": _MAP,
        "feature_gates": {**_MAP, "properties": {"status": {"type": "string"}, "enabled": _STRS, "stages": _MAP}},
        "resource_api": {**_MAP, "properties": {"versions": {"type": ["array", "null"], "items": {"type": "string"}},
                                                 "device_taint_rules": {"type": ["array", "null"], "items": {"type": "string"}}}},
        "drivers": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "published_versions": {"type": ["array", "null"]}}}},
        "device_classes": {"type": ["array", "object", "null"], "items": {"type": "object"}},
        "inventory": {**_MAP, "additionalProperties": {"type": ["object", "string"], "properties": {
            "devices": {"type": "integer"},
            "nodes": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                "devices": {"type": "integer"}, "memory": {"type": "object"}, "models": {"type": "object"}}}},
        }}},
    },
}


_OBJ = {"type": ["object", "null"]}

#: The parts of a summary that its readers (``diff``, ``compare``, the bundle) rely on, with their types. Beside
#: its producer, checked when written (:func:`write_report`), so a change here that the summary no longer meets
#: fails the run's own report rather than a later comparison; a hand-edited or foreign summary.json fails in one
#: line naming the field when read (:func:`dra_harness.report.diff.read_summary`).
SUMMARY_SCHEMA: Obj = {
    "type": "object",
    "properties": {
        "complete": {"type": ["boolean", "null"]},
        "verdict_reason": {"type": ["string", "null"]},
        "fingerprint": FINGERPRINT_SCHEMA,
        "results": {"type": "array", "items": {
            "type": "object", "required": ["nodeid", "outcome"],
            "properties": {"nodeid": {"type": "string"}, "outcome": {"type": "string"}, "message": {"type": ["string", "null"]},
                           "evidence": {"type": "array", "items": {"type": "object"}}},
        }},
        "contention": {**_OBJ, "properties": {"results": {"type": "array", "items": {
            "type": "object", "required": ["scenario", "design", "tiers"],
            "properties": {"scenario": {"type": "string"}, "design": {"type": "string"}, "preemption_probe": _OBJ,
                           "tiers": {"type": "array", "items": {"type": "object", "required": ["tier", "wait_s"],
                                                                "properties": {"tier": {"type": "string"}, "wait_s": {"type": "object"}}}}},
        }}}},
        "measurements": {"type": "array", "items": {
            "type": "object", "required": ["key", "name", "value"],
            "properties": {"key": {"type": "string"}, "name": {"type": "string"}, "value": {"type": "number"}},
        }},
    },
}


def read_checked(path: Path, schema: Obj) -> Obj:
    """One of the run's JSON files, or :class:`RunDirError` naming it: a report is never built on a guess."""
    data = load_json(path)
    yamlfile.validate(data, schema, RunDirError, str(path))
    return data


def _run_meta(run_dir: Path) -> Obj:
    if present(run_dir / "run.json"):
        return read_checked(run_dir / "run.json", RUN_SCHEMA)
    # Not written by `dra-harness run` (pytest directly): pytest writes junit.xml when the session ends.
    return {"run_id": run_dir.name, "command": [], "started": None, "finished": None,
            "complete": (run_dir / "junit.xml").is_file(), "exit_code": None}


def _optional(path: Path, schema: Obj) -> Obj | None:
    """A file the run may not have written (no fingerprint, no design); when present it must be well-formed."""
    return read_checked(path, schema) if present(path) else None


#: What makes a directory a run's to read (``diff`` and ``compare`` rebuild a summary from one): the marker or run.json
#: (`dra-harness run`), or what a pytest session wrote into its --report-dir. Not summary.json, which rendering
#: writes: a directory holding only one is no run's. Writing into a directory takes the marker itself.
RUN_EVIDENCE = (rundir.MARKER, "run.json", "junit.xml", "evidence.jsonl")


def _check_run_dir(run_dir: Path, writing: bool = False) -> None:
    """RunDirError unless ``run_dir`` is a run's: to write into, one that a run marked (a directory that merely holds
    a junit.xml is someone's CI output, whose files a render would overwrite)."""
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is not a directory")
    if writing and rundir.read_marker(run_dir) is None:
        raise RunDirError(f"{run_dir} is not a run directory: it has no {rundir.MARKER} marker, which every run (and a "
                          "pytest session with --report-dir) writes first, so nothing is rendered into it")
    if not any(present(run_dir / f) for f in RUN_EVIDENCE):
        raise RunDirError(f"{run_dir} is not a run directory (no {rundir.MARKER}, run.json, junit.xml or evidence.jsonl)")
    rundir.check_layout(run_dir)


#: What rendering writes, from the rest: never a reason to rebuild the summary (Allure's files are enriched after it).
_RENDERED = ("summary.json", "signoff.md", "signoff.html", "signoff.pdf", "conformance-bundle.tar.gz")
_RENDERED_DIRS = ("allure-results/", "allure-report/")


def newer_than_summary(run_dir: Path) -> str | None:
    """The newest of the run's own files (junit.xml, evidence.jsonl, ...) written after its summary.json, or None.

    A summary.json rendered at the start of a run (INCOMPLETE), or before a test session that pytest ran directly
    wrote junit.xml, says nothing about what the files now hold: whoever reads the summary rebuilds it instead.
    """
    summary = run_dir / "summary.json"
    if not summary.is_file():
        return None
    written = summary.stat().st_mtime_ns
    newer = [(p.stat().st_mtime_ns, rel) for rel in rundir.layout_files(run_dir)
             if rel not in _RENDERED and not rel.startswith(_RENDERED_DIRS) and (p := run_dir / rel).is_file()
             and p.stat().st_mtime_ns > written]
    return max(newer)[1] if newer else None


def build_summary(run_dir: Path) -> Obj:
    _check_run_dir(run_dir)
    meta = _run_meta(run_dir)
    fp = _optional(run_dir / "fingerprint.json", FINGERPRINT_SCHEMA) or {"error": "no fingerprint recorded"}
    rows = results.read_results(run_dir) + upgrade.rows(run_dir)
    cont = contention.load(run_dir)
    allocs = allocations.load(run_dir)
    concern_of = {r["nodeid"]: r["concern"] for r in rows}
    found = results.findings(rows) + contention.findings(cont["results"]) + [
        {"severity": "finding", "concern": concern_of.get(m["test"], "allocation"), "test": m["test"], "message": m["message"]}
        for m in allocations.mixed(allocs)]
    origin = provenance.summarise(fp, rows, allocs)
    for r in rows:
        r["evidence_text"] = [readable.sentence(rec) for rec in r["evidence"]]
    counts = results.counts(rows)
    lost = sum(c.get("jobs_lost") or 0 for c in cont["results"])
    checked = _with_contention(results.concerns(rows), cont["results"])
    verdict, reason = run_verdict(meta, rows, checked, lost)
    record = _optional(run_dir / "design.json", design.DESIGN_SCHEMA)
    return {
        "schema": SCHEMA_VERSION,
        "run_id": meta.get("run_id", run_dir.name),
        "harness_version": __version__,
        "command": meta.get("command", []),
        "started": meta.get("started"),
        "finished": meta.get("finished"),
        "complete": bool(meta.get("complete")),
        "exit_code": meta.get("exit_code"),
        "verdict": verdict,
        "verdict_reason": reason,
        "counts": counts,
        "provenance": origin,
        "fingerprint": fp,
        "concerns": checked,
        "results": rows,
        "findings": found,
        "measurements": results.measurements(rows) + contention.measurements(cont["results"]),
        "contention": {
            "results": [{k: v for k, v in c.items() if k != "_plots"} for c in cont["results"]],
            "sizing": cont["sizing"],
            "unreadable": cont["unreadable"],
        },
        "design": None if record is None else {
            "record": record, "comparison": design.compare(record, rows, cont["results"], fp),
        },
        "conformance": conformance_evidence.section(rows, {d["name"]: d["build"] for d in origin["drivers"] if d.get("build")}),
        "vendor_questions": vendor.questions(rows, fp),
        "allocations": {"pods": len(allocs), "rows": allocs[:ALLOCATION_ROWS_SHOWN]},
        "preflight": _preflight(run_dir),
    }


def run_verdict(meta: Obj, rows: list[Obj], checked: list[Obj], lost: int) -> tuple[str, str]:
    """The run's verdict and why: PASS only when every concern that ran established at least one pass.

    "Nothing failed" is not enough: a run whose checks were all skipped (no GPU, an API not served) or not
    established (a baseline taken from the cluster itself) proved nothing about those concerns, so it is
    PARTIAL, naming them — and never FAIL, which is kept for what the cluster got wrong.
    """
    counts = results.counts(rows)
    failed = counts.get("failed", 0) + counts.get("error", 0)
    if not meta.get("complete"):
        return "INCOMPLETE", ("the run is in progress or was interrupted" if meta.get("exit_code") is None
                              else f"the run ended with exit code {meta['exit_code']}")
    if not rows:
        return "NO RESULTS", "no test ran"
    if failed or lost:
        return "FAIL", f"{failed} checks failed" + (f", {lost} contention jobs lost" if lost else "")
    reason = f"{counts.get('passed', 0)} checks passed, {counts.get('skipped', 0)} skipped"
    if counts.get(results.NOT_ESTABLISHED):
        baseline = all(r["message"] == results.OBSERVED_BASELINE for r in rows if r["outcome"] == results.NOT_ESTABLISHED)
        reason += (f", {counts[results.NOT_ESTABLISHED]} not established (" + (
            "their baseline came from the cluster under test: pass --expected-hardware)" if baseline
            else "the cluster did not let them be tested, they had nothing to check, or compared the cluster with itself: see the findings)"))
    unproven = [c for c in checked if c["checks"] and not any(k["outcome"] == "passed" for k in c["checks"])]
    if unproven:
        return "PARTIAL", reason + "; no check passed in " + "; ".join(
            f"{c['title']} ({_tally(c['checks'])})" for c in unproven)
    return "PASS", reason


def _tally(checks: list[Obj]) -> str:
    """``0 passed, 3 skipped, 1 not established``: a concern's checks by outcome, passes always named."""
    n = results.counts(checks)
    return ", ".join([f"{n.get('passed', 0)} passed"] + [f"{n[o]} {o}" for o in ("skipped", results.NOT_ESTABLISHED) if n.get(o)])


def _preflight(run_dir: Path) -> Obj | None:
    """What the cluster allowed us to test (``preflight.json``, written by the run's first stage), as rows."""
    path = run_dir / preflight.FILE
    if not present(path):
        return None
    raw = load_json(path)
    try:
        facts = preflight.Facts.from_json(raw)
    except (TypeError, AttributeError, KeyError) as e:
        raise RunDirError(f"{path}: not a preflight record ({e})") from None
    return {"seconds": facts.seconds, "rows": preflight.describe(facts)}


def _with_contention(concerns: list[Obj], runs: list[Obj]) -> list[Obj]:
    """The contention concern also counts the scenario runs (written by the contention suite or CLI)."""
    for c in concerns:
        if c["id"] == "contention" and runs:
            for r in runs:
                misses = [t["tier"] for t in r["tiers"] if t.get("verdict") == "misses"]
                unknown = [t["tier"] for t in r["tiers"] if t.get("verdict") == "not established"]
                judged = "; every other tier meets its tolerable wait" if unknown else "; every tier meets its tolerable wait"
                c["checks"].append({
                    "check": f"{r['scenario']} under design {r['design']}: {r.get('jobs_lost') or 0} jobs lost"
                             + (f"; tiers over their tolerable wait: {', '.join(misses)}" if misses else judged)
                             + (f"; not established (tolerable wait within ten control-plane floors at this compression): "
                                f"{', '.join(unknown)}" if unknown else ""),
                    "nodeid": r["_file"], "outcome": "failed" if r.get("jobs_lost") else "passed",
                })
            c["outcome"] = results.concern_outcome(c["checks"])
    return concerns


def write_report(run_dir: Path) -> Path:
    """Redact the run's files, then (re)write summary.json, signoff.md, signoff.html and the Allure extras; return signoff.html.

    Our own writers redact what they write, but junit.xml and allure-results/ are
    written by pytest's plugins. Redacting here, over every file of the run layout,
    rather than in a pytest hook is the robust choice: it runs after the test process
    has exited, so no plugin writes after it whatever their hook order, under xdist
    (whose workers write Allure files themselves) or after a killed session; and it runs
    on every render, so ``dra-harness report DIR`` also cleans a directory written by
    pytest directly. The summary is then built from files already redacted.
    """
    run_dir = Path(run_dir)
    _check_run_dir(run_dir, writing=True)
    # allure-report/ is generated from allure-results/ once those are redacted (its data is base64 in minified
    # JavaScript, which a credential pattern could only corrupt); every other file of the layout is redacted here.
    redact_files(run_dir / rel for rel in rundir.layout_files(run_dir) if not rel.startswith("allure-report/"))
    summary = build_summary(run_dir)
    yamlfile.validate(summary, SUMMARY_SCHEMA, RunDirError, f"summary of {run_dir} as built (a harness bug: report it)")
    write_json(run_dir / "summary.json", summary)
    atomic_write(run_dir / "signoff.md", render.markdown(summary))
    html_path = run_dir / "signoff.html"
    atomic_write(html_path, render.html(summary, run_dir))
    written = [run_dir / "summary.json", run_dir / "signoff.md", html_path]
    if (run_dir / "allure-results").is_dir() or summary["results"]:
        written += allure_extra.enrich(run_dir, summary)
    rundir.record(run_dir, written)
    return html_path
