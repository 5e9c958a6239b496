"""Two runs compared: the pre-upgrade gate.

Run the suites on the version you run today (BASE) and on the one you want
(CANDIDATE); the diff lists what changed — Kubernetes version, DRA feature gates,
served APIs (DeviceTaintRule...), outcomes, preemption, timings and contention waits —
and calls a *regression* only what must stop an upgrade: a check that newly fails, an
incomplete candidate run, a timing or wait that grew beyond both thresholds (relative
and absolute, so noise on a 0.2 s figure does not fail CI), a tier that newly misses
its tolerable wait, or lost jobs. A check that passed in BASE and was skipped, absent
or not established in CANDIDATE, and a candidate with fewer checks, are regressions
too: a gate that passes because the test no longer ran proves nothing. So is lost
contention coverage: a tier that met its tolerable wait in BASE and is not established or
absent in CANDIDATE, or a design gone from CANDIDATE (a tier no longer judged never
"newly misses"). Where that is expected (a suite dropped on purpose), ``accept_missing``
names them by glob patterns on the check's nodeid (a contention design's or tier's id:
:func:`contention_id`) and lists them as changes, saying which pattern accepted each: accepting
every missing check at once would let a gate pass on a candidate that ran nothing.
Everything else is reported as a change.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from dra_harness import yamlfile
from dra_harness.kube.types import Obj
from dra_harness.report.reading import load_json, present
from dra_harness.report.summary import SUMMARY_SCHEMA, RunDirError, build_summary, newer_than_summary
from dra_harness.report.readable import duration

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Thresholds:
    #: A timing regresses when it grows by more than this fraction AND by more than ``min_delta_s``.
    max_slowdown: float = 0.5
    min_delta_s: float = 1.0
    #: Contention waits (scenario seconds) likewise.
    max_wait_increase: float = 0.25
    min_wait_delta_s: float = 60.0


@dataclass
class Diff:
    base: str
    candidate: str
    regressions: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    measurements: list[Obj] = field(default_factory=list)
    #: --accept-missing pattern -> the checks it accepted (in the order given; an empty list: it matched none).
    accepted: dict[str, list[str]] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return bool(self.regressions)

    def as_dict(self) -> Obj:
        return {"base": self.base, "candidate": self.candidate, "regression": self.failed,
                "regressions": self.regressions, "changes": self.changes, "measurements": self.measurements,
                "accepted_missing": self.accepted}


def read_summary(path: Path, named: bool = False) -> Obj:
    """A summary.json, checked; a malformed one is one line naming it (``dra-harness report`` rebuilds it).

    One found in a run directory is never read through a link; one the user ``named`` on the command line is
    theirs to link (``latest.json``), so the link is resolved first. Either way a FIFO or a huge file is refused.
    """
    summary = load_json(path.resolve() if named else path, f"summary {path}")
    yamlfile.validate(summary, SUMMARY_SCHEMA, RunDirError, f"summary {path}")
    return summary


def load(run_dir: Path | str) -> Obj:
    """A run's summary: summary.json when present and not older than the run's files, else rebuilt from those files.

    A stale summary (rendered before junit.xml or evidence.jsonl was last written) would gate on what the run
    looked like then; the rebuilt one is used, with a warning, and the directory is left as it is.
    """
    path = Path(run_dir)
    if path.is_file() and path.name.endswith(".json"):
        if path.name == "summary.json" and newer_than_summary(path.parent):
            return load(path.parent)
        return read_summary(path, named=True)
    if not path.exists():
        raise RunDirError(f"{path} does not exist")
    newer = newer_than_summary(path) if path.is_dir() else None
    if present(path / "summary.json") and newer is None:
        return read_summary(path / "summary.json")
    if newer is not None:
        log.warning("%s is older than %s: using a summary rebuilt from the run's files (`dra-harness report %s` "
                    "rewrites it)", path / "summary.json", path / newer, path)
    return build_summary(path)


def k8s_version(s: Obj) -> str:
    return str(((s.get("fingerprint") or {}).get("kubernetes") or {}).get("gitVersion", "unknown"))


def matched_checks(summaries: list[Obj]) -> list[tuple[str, list[Obj | None]]]:
    """Every check of any run, matched across runs by nodeid (parametrized ids included): (nodeid, each run's row or None).

    In the order the checks first appear, run by run; ``diff`` and ``compare`` both match this way.
    """
    runs = [{r["nodeid"]: r for r in s.get("results", [])} for s in summaries]
    nodeids = dict.fromkeys(n for rows in runs for n in rows)
    return [(n, [rows.get(n) for rows in runs]) for n in nodeids]


def _gates(s: Obj) -> set[str] | None:
    g = (s.get("fingerprint") or {}).get("feature_gates") or {}
    return set(g.get("enabled", [])) if g.get("status") == "read" else None


def _api(s: Obj, key: str) -> list[str] | None:
    api = (s.get("fingerprint") or {}).get("resource_api") or {}
    return api.get(key) if "versions" in api else None


def compare(base: Obj, cand: Obj, t: Thresholds = Thresholds(), accept_missing: tuple[str, ...] = ()) -> Diff:
    """The diff; a check that no longer ran whose nodeid matches a glob of ``accept_missing`` is a change, not a
    regression, and so is a lower count when every check absent from the candidate matches one."""
    d = Diff(base=f"{base.get('run_id')} ({k8s_version(base)})", candidate=f"{cand.get('run_id')} ({k8s_version(cand)})",
             accepted={p: [] for p in accept_missing})
    _fingerprint(base, cand, d)
    _scheduler_dra(base, cand, t, d)
    if not cand.get("complete"):
        d.regressions.append(f"candidate run is incomplete ({cand.get('verdict_reason', 'interrupted')}): it cannot pass a gate")
    _outcomes(base, cand, d)
    _count(base, cand, d)
    _behaviour(base, cand, d)
    _contention(base, cand, d)
    _measurements(base, cand, t, d)
    return d


def _dra_means(s: Obj) -> dict[str, float]:
    timings = (s.get("fingerprint") or {}).get("scheduler_dra") or {}
    return {p: float(v) for p, v in (timings.get("mean_s") or {}).items() if isinstance(v, (int, float))}


def _scheduler_dra(base: Obj, cand: Obj, t: Thresholds, d: Diff) -> None:
    """The DynamicResources plugin's mean time per call over each whole run, per extension point: a change beyond
    --max-slowdown either way is listed. Not a gate: milliseconds per call move with the machine's load."""
    b, c = _dra_means(base), _dra_means(cand)
    for point in sorted(set(b) & set(c)):
        if b[point] > 0 and abs(c[point] - b[point]) / b[point] > t.max_slowdown:
            d.changes.append(f"scheduler DRA plugin {point}, mean per call over the run: {duration(b[point])} -> "
                             f"{duration(c[point])} ({(c[point] - b[point]) / b[point]:+.0%})")


def _fingerprint(base: Obj, cand: Obj, d: Diff) -> None:
    if k8s_version(base) != k8s_version(cand):
        d.changes.append(f"Kubernetes {k8s_version(base)} -> {k8s_version(cand)}")
    bg, cg = _gates(base), _gates(cand)
    if bg is None or cg is None:
        d.changes.append("DRA feature gates: unknown in " + ("base" if bg is None else "candidate") + " (metrics not readable)")
    else:
        for g in sorted(cg - bg):
            d.changes.append(f"feature gate {g}: on in candidate only")
        for g in sorted(bg - cg):
            d.changes.append(f"feature gate {g}: on in base only")
        bs = ((base.get("fingerprint") or {}).get("feature_gates") or {}).get("stages") or {}
        cs = ((cand.get("fingerprint") or {}).get("feature_gates") or {}).get("stages") or {}
        for g in sorted(set(bs) & set(cs)):
            if bs[g] != cs[g]:
                d.changes.append(f"feature gate {g}: {bs[g]} -> {cs[g]}")
    for key, what in (("versions", "resource.k8s.io served versions"), ("device_taint_rules", "DeviceTaintRule served in")):
        b, c = _api(base, key), _api(cand, key)
        if b is not None and c is not None and sorted(b) != sorted(c):
            d.changes.append(f"{what}: {', '.join(b) or 'none'} -> {', '.join(c) or 'none'}")
    bd = {x["name"]: x.get("published_versions") for x in (base.get("fingerprint") or {}).get("drivers", [])}
    cd = {x["name"]: x.get("published_versions") for x in (cand.get("fingerprint") or {}).get("drivers", [])}
    for name in sorted(set(bd) | set(cd)):
        if bd.get(name) != cd.get(name):
            d.changes.append(f"driver {name}: {bd.get(name, 'absent')} -> {cd.get(name, 'absent')}")


#: Candidate outcomes of a check that passed in base but established nothing now (None: absent).
_NO_LONGER_RUN = (None, "skipped", "not established")


def accepting(patterns: Iterable[str], nodeid: str) -> str | None:
    """The first --accept-missing glob that matches a check's nodeid (case-sensitive, as nodeids are), or None."""
    return next((p for p in patterns if fnmatch.fnmatchcase(nodeid, p)), None)


def _missing(d: Diff, nodeid: str, what: str) -> None:
    """A check that no longer ran: a regression, or a change a pattern the user gave accepted."""
    pattern = accepting(d.accepted, nodeid)
    if pattern is None:
        d.regressions.append(what)
    else:
        d.accepted[pattern].append(nodeid)
        d.changes.append(f"accepted (--accept-missing {pattern}): {what}")


def _outcomes(base: Obj, cand: Obj, d: Diff) -> None:
    bad = ("failed", "error")
    for nodeid, (b, c) in sorted(matched_checks([base, cand]), key=lambda m: m[0]):
        bo = b["outcome"] if b else None
        co = c["outcome"] if c else None
        if bo == co:
            continue
        if co in bad:
            why = (c.get("message") or "").splitlines()[0][:200] if c and c.get("message") else ""
            d.regressions.append(f"new failure: {nodeid} ({bo or 'absent'} -> {co}){': ' + why if why else ''}")
        elif bo == "passed" and co in _NO_LONGER_RUN:
            why = (c.get("message") or "").splitlines()[0][:160] if c else ""
            _missing(d, nodeid, f"check no longer passes: {nodeid} (passed -> {co or 'absent'})"
                     + (f": {why}" if why else ""))
        elif c is None:
            d.changes.append(f"check absent from candidate: {nodeid} (was {bo})")
        elif b is None:
            d.changes.append(f"new check: {nodeid} ({co})")
        else:
            why = c.get("message") or b.get("message") or ""
            d.changes.append(f"behaviour changed: {nodeid}: {bo} -> {co}" + (f" ({why.splitlines()[0][:160]})" if why else ""))


def _count(base: Obj, cand: Obj, d: Diff) -> None:
    before, after = len(base.get("results", [])), len(cand.get("results", []))
    if after >= before:
        return
    what = f"fewer checks in candidate: {before} -> {after}"
    absent = [n for n, (_, c) in matched_checks([base, cand]) if c is None]
    unaccepted = [n for n in absent if accepting(d.accepted, n) is None]
    if absent and not unaccepted:
        for n in absent:  # those that never passed in base were not accepted above, yet lower the count
            pattern = accepting(d.accepted, n)
            if pattern is not None and n not in d.accepted[pattern]:
                d.accepted[pattern].append(n)
        d.changes.append(f"accepted (--accept-missing): {what}: every absent check matched a pattern")
        return
    d.regressions.append(what + (f" ({len(unaccepted)} absent checks match no --accept-missing pattern, e.g. {unaccepted[0]})"
                                 if d.accepted and unaccepted else ""))


#: Evidence that states how Kubernetes behaved, compared as text between runs.
_BEHAVIOUR_KEYS = ("scheduler_message", "condition", "event", "while_driver_down")


_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
#: Generated names differ in every run: Kubernetes' generateName suffix (no vowels) and our hex suffixes.
_GENERATED = re.compile(r"-(?:[bcdfghjklmnpqrstvwxz2456789]{5}|[0-9a-f]{5})\b")


def normalise(text: str) -> str:
    """Evidence text with what differs in every run (times, generated names) blanked."""
    return _GENERATED.sub("-<id>", _TIME.sub("<time>", text))


def _behaviour(base: Obj, cand: Obj, d: Diff) -> None:
    def facts(s: Obj) -> dict[tuple[str, str], str]:
        out = {}
        for r in s.get("results", []):
            for rec in r.get("evidence", []):
                for k in _BEHAVIOUR_KEYS:
                    if k in rec:
                        out[(r["nodeid"], k)] = normalise(json.dumps(rec[k], sort_keys=True, default=str))
        return out

    b, c = facts(base), facts(cand)
    for key in sorted(set(b) & set(c)):
        if b[key] != c[key]:
            d.changes.append(f"behaviour changed: {key[0]} {key[1]}: {b[key][:200]} -> {c[key][:200]}")


def contention_runs(s: Obj) -> dict[tuple[str, str], Obj]:
    """A run's contention results by (scenario, design), the key both ``diff`` and ``compare`` match them on."""
    return {(r["scenario"], r["design"]): r for r in (s.get("contention") or {}).get("results", [])}


def contention_id(scenario: str, design: str, tier: str | None = None) -> str:
    """What ``--accept-missing`` matches for a contention design (``contention::<scenario>::<design>``) or one of its
    tiers (``...::<tier>``): the prefix of the run's contention measurement keys."""
    return f"contention::{scenario}::{design}" + (f"::{tier}" if tier is not None else "")


#: A tier's verdicts that establish something; any other (``not established``, none) established nothing.
_VERDICTS = ("meets", "misses")


def _contention(base: Obj, cand: Obj, d: Diff) -> None:
    """Contention as the gate sees it: jobs lost or a tier that now misses is a regression, and so is a loss of
    coverage, like a check that no longer ran: a design, or a tier, that met its tolerable wait in base and is gone
    from the candidate or no longer established there (unless ``--accept-missing`` names it)."""
    b, c = contention_runs(base), contention_runs(cand)
    if b and not c:
        d.changes.append("contention ran in base but not in candidate")
    for key in sorted(set(b) - set(c)):
        where = f"contention {key[0]} / {key[1]}"
        met = [t["tier"] for t in b[key]["tiers"] if t.get("verdict") == "meets"]
        if met:
            _missing(d, contention_id(*key), f"{where}: design absent from candidate (in base tiers {', '.join(met)} met "
                                              "their tolerable wait)")
        else:
            d.changes.append(f"{where}: design absent from candidate (no tier met its tolerable wait in base)")
    for key in sorted(set(b) & set(c)):
        where = f"contention {key[0]} / {key[1]}"
        if (c[key].get("jobs_lost") or 0) > (b[key].get("jobs_lost") or 0):
            d.regressions.append(f"{where}: jobs lost {b[key].get('jobs_lost')} -> {c[key].get('jobs_lost')}")
        ct = {t["tier"]: t for t in c[key]["tiers"]}
        for old in b[key]["tiers"]:
            t = ct.get(old["tier"])
            was, now = old.get("verdict"), (t.get("verdict") if t else None)
            if was == "meets" and now == "misses" and t:
                d.regressions.append(f"{where}: tier {t['tier']} now misses its tolerable wait "
                                     f"(p95 {old['wait_s'].get('p95')} -> {t['wait_s'].get('p95')} s, tolerable {t.get('tolerable_wait_s')} s)")
            elif was == "meets" and now not in _VERDICTS:
                _missing(d, contention_id(*key, old["tier"]), f"{where}: tier {old['tier']} no longer established "
                                                              f"(meets -> {'absent' if t is None else now or 'no verdict'})")
            elif t and was != now:
                d.changes.append(f"{where}: tier {old['tier']}: {was or 'no verdict'} -> {now or 'no verdict'}")
        bp, cp = b[key].get("preemption_probe") or {}, c[key].get("preemption_probe") or {}
        if bp and cp and bool(bp.get("freed_by_preemption")) != bool(cp.get("freed_by_preemption")):
            d.changes.append(f"{where}: preemption freed a device: {bool(bp.get('freed_by_preemption'))} -> "
                             f"{bool(cp.get('freed_by_preemption'))} (scheduler: {cp.get('scheduler_message', '')[:160]})")


def _measurements(base: Obj, cand: Obj, t: Thresholds, d: Diff) -> None:
    b = {m["key"]: m for m in base.get("measurements", [])}
    for m in cand.get("measurements", []):
        old = b.get(m["key"])
        if old is None:
            continue
        before, after = old["value"], m["value"]
        delta = after - before
        wait = m.get("kind") == "wait"
        rel_limit, abs_limit = (t.max_wait_increase, t.min_wait_delta_s) if wait else (t.max_slowdown, t.min_delta_s)
        ratio = (delta / before) if before > 0 else (float("inf") if delta > 0 else 0.0)
        # Waits gate on p95 (and the preemption probe's wait); p50/p99/max are shown, not gated.
        gated = not wait or m["name"] in ("wait_p95", "high_priority_wait_s")
        regressed = gated and delta > abs_limit and ratio > rel_limit
        row = {"key": m["key"], "base": before, "candidate": after, "delta": round(delta, 3),
               "ratio": None if ratio == float("inf") else round(ratio, 3), "regression": regressed}
        if regressed or abs(delta) > abs_limit:
            d.measurements.append(row)
        if regressed:
            d.regressions.append(f"{'wait' if wait else 'timing'} {m['key']}: {_s(before)} -> {_s(after)} s "
                                 f"(+{_s(delta)} s, +{ratio:.0%}; limits +{rel_limit:.0%} and +{abs_limit:g} s)")


def _s(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def text(d: Diff) -> str:
    lines = [f"base:      {d.base}", f"candidate: {d.candidate}", ""]
    lines.append(f"regressions ({len(d.regressions)}):")
    lines += [f"  - {r}" for r in d.regressions] or ["  none"]
    lines.append(f"changes ({len(d.changes)}):")
    lines += [f"  - {c}" for c in d.changes] or ["  none"]
    if d.measurements:
        lines.append("measurements beyond the absolute threshold:")
        for m in d.measurements:
            flag = "REGRESSION" if m["regression"] else "ok"
            lines.append(f"  {m['key']}: {_s(m['base'])} -> {_s(m['candidate'])} s [{flag}]")
    for pattern, nodeids in d.accepted.items():
        n = len(nodeids)
        lines.append(f"--accept-missing {pattern}: accepted {n} check{'' if n == 1 else 's'}"
                     + ("" if n else " (it matched no check that no longer ran)"))
        lines += [f"  - {x}" for x in nodeids]
    lines += ["", "verdict: " + ("REGRESSION (exit 1)" if d.failed else "no regression (exit 0)")]
    return "\n".join(lines)
