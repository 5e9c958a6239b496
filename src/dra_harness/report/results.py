"""What the tests found: one row per test, grouped by concern, with findings and measurements.

Read from ``junit.xml`` (through junitparser, so a malformed file fails loudly) and
joined with ``evidence.jsonl`` (what each test recorded: device, node, seconds).
Measurements are the timings tests record (keys ending in ``_s``, or ``seconds``);
``dra-harness diff`` compares them between runs.

A check that passed against expectations taken from the cluster under test (the
inventory suite records ``expected_source: observed`` on an existing cluster without
``--expected-hardware``) compared the cluster with itself: it passes by construction,
so the report shows it as *not established*, never as passed. So is a pass whose test
recorded ``not_established`` (why it had nothing to check, e.g. a tenant audit over no claims),
and a skip whose reason starts "not established:" (the cluster lacked what the check needs:
a preflight fact, or a pod whose image it could not pull; see :class:`dra_harness.errors.NotEstablished`).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path

from junitparser import Error, Failure, JUnitXml, Skipped

from dra_harness.kube.types import Obj
from dra_harness.report.files import RunDirError
from dra_harness.report.reading import present, read_bytes, read_text

#: Each suite names its concern (``pytest.mark.concern(id, title)``, :mod:`dra_harness.plugin.concerns`) and the
#: test's evidence line carries it. This table is for runs written before suites named theirs (a recorded run, an
#: older harness): suite module -> (concern id, title); its order is the report's, a concern it lacks comes after.
CONCERNS: dict[str, tuple[str, str]] = {
    "inventory": ("inventory", "Inventory"),
    "allocation": ("allocation", "Allocation"),
    "sharing": ("sharing", "Sharing and isolation"),
    "gpu_visibility": ("gpu-visibility", "GPU visibility in containers"),
    "coplacement": ("coplacement", "Co-placement"),
    "topology": ("topology", "Topology"),
    "replicas": ("replicas", "Replicas on different hardware"),
    "governance": ("governance", "Governance"),
    "metrics": ("metrics", "Metrics"),
    "driver_restart": ("driver-restart", "Driver restart"),
    "node_drain": ("node-drain", "Node drain"),
    "device_taints": ("device-taints", "Device taints"),
    "device_health": ("device-health", "Device health"),
    "partitions": ("partitions", "Partitionable devices"),
    "driver_configs": ("driver-configs", "Driver configurations"),
    "parity": ("parity", "Upstream e2e parity"),
    "contention": ("contention", "Contention"),
    "upgrade": ("upgrade", "Upgrade"),
}
NOT_ESTABLISHED = "not established"
OBSERVED_BASELINE = ("not established: the expected hardware was what the cluster under test published at the "
                     "start of the run (no --expected-hardware), so this check compared the cluster with itself")
_RANK = {"failed": 4, "error": 4, NOT_ESTABLISHED: 3, "passed": 2, "skipped": 1}


def as_not_established(reason: str) -> str:
    """A skip reason the report reads back as "not established"."""
    return reason if reason.startswith(f"{NOT_ESTABLISHED}:") else f"{NOT_ESTABLISHED}: {reason}"


def established(outcome: str, message: str, records: list[Obj]) -> tuple[str, str]:
    """The outcome the report shows: a pass against a baseline observed from the cluster under test,
    or over nothing (a record's ``not_established``), is not one; nor is a skip the harness could not test."""
    if outcome == "skipped" and message.startswith(f"{NOT_ESTABLISHED}:"):
        return NOT_ESTABLISHED, message
    if outcome == "passed" and any(r.get("expected_source") == "observed" for r in records):
        return NOT_ESTABLISHED, OBSERVED_BASELINE
    nothing = next((r["not_established"] for r in records if r.get("not_established")), None)
    if outcome == "passed" and nothing:
        return NOT_ESTABLISHED, f"not established: {nothing}"
    return outcome, message


def slug(nodeid: str) -> str:
    """A test's short name: its namespace's, its label's and its evidence file's (``failures/<slug>.json``).

    Readable up to 30 characters, then a hash of the module and the test's full name, so tests that
    differ only past the cut (``[graceful]`` and ``[sigkill]``) do not overwrite each other's dump.
    The module is the file's stem: the plugin's nodeid and the one read back from junit.xml agree on it.
    """
    path, _, name = nodeid.rpartition("::")
    readable = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:30].strip("-") or "test"
    module = path.rpartition("/")[2].removesuffix(".py")
    return f"{readable}-{hashlib.sha256(f'{module}::{name}'.encode()).hexdigest()[:8]}"


def _evidence(report_dir: Path) -> dict[str, Obj]:
    out: dict[str, Obj] = {}
    path = report_dir / "evidence.jsonl"
    if not present(path):
        return out
    # It grows with every test of a session (and of earlier sessions in the same --report-dir): its own cap.
    text = read_text(path, "evidence log")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line cut by a killed run
        if not isinstance(rec, dict) or not isinstance(rec.get("test"), str):
            raise RunDirError(f"{path}: line {number}: not an evidence record (a JSON object with a test)")
        out[rec["test"]] = rec
    return out


def read_results(report_dir: Path) -> list[Obj]:
    """One entry per test case in junit.xml, joined with its evidence records."""
    junit = report_dir / "junit.xml"
    if not present(junit):
        return []
    evidence = _evidence(report_dir)
    results = []
    xml = read_bytes(junit, "JUnit report")  # a link, a FIFO or a huge file is refused, not parsed
    try:
        suites = list(JUnitXml.fromfile(io.BytesIO(xml)))
    except Exception as e:  # noqa: BLE001 - a junit.xml cut short by a killed run still gets a report
        return [{"suite": "harness", "concern": "harness", "test": "junit.xml", "nodeid": "junit.xml", "outcome": "error",
                 "seconds": 0.0, "message": f"junit.xml unreadable: {e}", "evidence": [], "failure_dump": None}]
    for suite in suites:
        for case in suite:
            outcome, message = "passed", ""
            for r in case.result:
                if isinstance(r, (Failure, Error, Skipped)):
                    outcome = {Failure: "failed", Error: "error", Skipped: "skipped"}[type(r)]
                    message = (r.message or "").strip()
                    break
            # An interrupted session writes a case without a class or name.
            classname, name = case.classname or "", case.name or "(interrupted)"
            nodeid = (classname.replace(".", "/") + ".py::" if classname else "") + name
            module = classname.split(".")[-1].removeprefix("test_") or "harness"
            failure_file = report_dir / "failures" / f"{slug(nodeid)}.json"
            line = evidence.get(nodeid, {})
            records = line.get("records", [])
            named = line.get("concern")
            concern, title = ((named["id"], named["title"]) if isinstance(named, dict) and named.get("id")
                              else CONCERNS.get(module, (module, module)))
            outcome, message = established(outcome, message, records)
            results.append({
                "suite": module,
                "concern": concern,
                "concern_title": title,
                "test": name,
                "nodeid": nodeid,
                "outcome": outcome,
                "seconds": round(float(case.time or 0), 3),
                "message": message,
                "evidence": records,
                "failure_dump": f"failures/{failure_file.name}" if outcome in ("failed", "error") and failure_file.exists() else None,
            })
    return results


def counts(results: list[Obj]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in results:
        out[r["outcome"]] = out.get(r["outcome"], 0) + 1
    return out


def concern_outcome(rows: list[Obj]) -> str:
    if not rows:
        return "not run"
    worst = max(rows, key=lambda r: _RANK.get(r["outcome"], 0))["outcome"]
    if worst in ("skipped", NOT_ESTABLISHED):
        return worst
    return "failed" if worst in ("failed", "error") else "passed"


def concern_titles(results: list[Obj]) -> dict[str, str]:
    """Concern id -> title in the report's order: the known concerns first, then those only a suite named."""
    known = dict(CONCERNS.values())
    named = {str(r["concern"]): str(r.get("concern_title") or known.get(r["concern"], r["concern"])) for r in results}
    return {cid: named.get(cid, title) for cid, title in known.items()} | {
        cid: named[cid] for cid in sorted(set(named) - set(known))}


def concerns(results: list[Obj]) -> list[Obj]:
    """Every known concern (``not run`` where no check of it ran) and every other concern a result names."""
    out = []
    for cid, title in concern_titles(results).items():
        rows = [r for r in results if r["concern"] == cid]
        out.append({
            "id": cid,
            "title": title,
            "outcome": concern_outcome(rows),
            "checks": [{"check": human(r["test"]), "nodeid": r["nodeid"], "outcome": r["outcome"]} for r in rows],
        })
    return out


def human(test_name: str) -> str:
    """``test_pods_sharing_a_claim[x]`` -> ``pods sharing a claim [x]``."""
    base, _, param = test_name.partition("[")
    text = base.removeprefix("test_").replace("_", " ")
    return f"{text} [{param}" if param else text


def figures(records: list[Obj]) -> list[Obj]:
    """The numbers a test recorded (top-level, not the record time): {key: "<name>" or "<name>#<n>" for the n-th repeat,
    name, value, timing: whether it is seconds (a key ending in ``_s``, or ``seconds``)}."""
    out = []
    seen: dict[str, int] = {}
    for rec in records:
        for k, v in rec.items():
            if k == "t" or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            n = seen.get(k, 0)
            seen[k] = n + 1
            out.append({"key": k + (f"#{n}" if n else ""), "name": k, "value": v, "timing": k.endswith("_s") or k == "seconds"})
    return out


def measurements(results: list[Obj]) -> list[Obj]:
    """Every timing a test recorded: {key: "<nodeid>::<name>", value, unit}."""
    return [{"key": f"{r['nodeid']}::{f['key']}", "test": r["nodeid"], "name": f["name"], "value": float(f["value"]), "unit": "s"}
            for r in results for f in figures(r["evidence"]) if f["timing"]]


def findings(results: list[Obj]) -> list[Obj]:
    """What a reviewer must read: failed checks, and findings tests recorded (e.g. the tenant audit)."""
    out = []
    for r in results:
        if r["outcome"] in ("failed", "error"):
            out.append({"severity": "failure", "concern": r["concern"], "test": r["nodeid"],
                        "message": (r["message"] or "failed").splitlines()[0][:500]})
        elif r["outcome"] == NOT_ESTABLISHED:
            out.append({"severity": NOT_ESTABLISHED, "concern": r["concern"], "test": r["nodeid"], "message": r["message"]})
        # Only ``findings`` (plural) counts: a singular ``finding`` is what a planted control recorded.
        for rec in r["evidence"]:
            value = rec.get("findings")
            for item in value if isinstance(value, list) else [value] if value else []:
                out.append({"severity": "finding", "concern": r["concern"], "test": r["nodeid"], "message": str(item)[:500]})
    return out
