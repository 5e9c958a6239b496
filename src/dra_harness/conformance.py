"""Which conformance requirements the suite checks give evidence for, and what a run says of each.

Why: a platform team asks "does this cluster meet the CNCF Kubernetes AI Conformance MUSTs, and
does our driver show KEP-5970's minimum behaviours?", not "did 77 tests pass". The answer needs
a mapping from checks to requirements that is honest both ways: every check is listed (a check
that proves nothing says so, rather than silently counting), and every requirement no check
covers is a named gap, never a pass. The mapping is data (``data/conformance.yaml``) so that
reviewers read and amend it without reading code; the unit tests fail when a suite gains a check
the mapping does not list or keeps an entry for a check that is gone.

Why :mod:`ast` and not an import: the suites import the plugin and the cluster fixtures, and
collecting them needs pytest; finding their test functions must work anywhere the package is
installed, from the source text alone.

A verdict per requirement: *met* when a mapped check passed and none failed; *not met* when any
mapped check failed (a failure is never outweighed by a pass); *not established* when nothing
mapped ran to a pass (with the skip reasons), or no check covers it yet (with its gap).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dra_harness import data, yamlfile
from dra_harness.errors import InputError

#: The suites ship inside the package, beside this module (the checkout's suites/ links there).
SUITES = Path(__file__).with_name("suites")
FRAMEWORKS = ("ai-conformance", "kep-5970")
LEVELS = ("MUST", "SHOULD")
REACHABLE = ("embedded", "kind", "gpu-only", "not-served")
OUTCOMES = ("passed", "failed", "skipped", "error")
State = Literal["met", "not met", "not established"]

_URL = {"type": "string", "pattern": r"^https://\S+$"}
_TEXT = {"type": "string", "minLength": 1}
SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["requirements", "checks", "gaps"],
    "properties": {
        "requirements": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False,
            "required": ["id", "framework", "title", "level", "since", "summary", "source"],
            "properties": {
                "id": {"type": "string", "pattern": r"^[a-z0-9_.-]+(/[a-z0-9_.-]+)?$"},
                "framework": {"enum": list(FRAMEWORKS)}, "kar": {"type": "string", "pattern": r"^KAR-\d{4}$"},
                "title": _TEXT, "level": {"enum": list(LEVELS)},
                # Quoted in the file: YAML would read 1.30 as the number 1.3.
                "since": {"type": "string", "pattern": r"^1\.\d+$"},
                "summary": _TEXT, "source": _URL, "also": {"type": "array", "items": _URL}, "note": _TEXT}}},
        "checks": {"type": "object",
                   "propertyNames": {"pattern": r"^test_\w+::(Test\w+::)?test_\w+$"},
                   "additionalProperties": {
                       "type": "object", "additionalProperties": False, "required": ["requirements", "why"],
                       "properties": {"requirements": {"type": "array", "uniqueItems": True, "items": {"type": "string"}},
                                      "why": _TEXT}}},
        "gaps": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["requirement", "missing", "reachable"],
            "properties": {"requirement": {"type": "string"}, "missing": _TEXT, "reachable": {"enum": list(REACHABLE)}}}},
    },
}


@dataclass(frozen=True)
class Requirement:
    id: str
    framework: str
    title: str
    level: str
    since: str
    summary: str
    source: str
    kar: str = ""
    also: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class CheckMapping:
    check: str
    requirements: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Gap:
    requirement: str
    missing: str
    reachable: str


@dataclass(frozen=True)
class Mapping:
    requirements: tuple[Requirement, ...]
    checks: dict[str, CheckMapping]
    gaps: tuple[Gap, ...]

    def checks_for(self, requirement: str) -> list[str]:
        return sorted(c for c, m in self.checks.items() if requirement in m.requirements)


@dataclass(frozen=True)
class Verdict:
    requirement: Requirement
    state: State
    reason: str  # one line: which checks decided it, or why nothing could
    checks: tuple[str, ...]  # the checks mapped to it


def load(path: Path | str | None = None) -> Mapping:
    """The shipped mapping (or ``path``'s), checked: InputError with one line for a malformed file."""
    p = Path(path) if path is not None else data.path("conformance.yaml")
    prefix = f"conformance mapping {p}"
    raw = yamlfile.load(p, InputError, prefix)
    yamlfile.validate(raw, SCHEMA, InputError, prefix)
    reqs = tuple(Requirement(**{**r, "also": tuple(r.get("also", ()))}) for r in raw["requirements"])
    ids = [r.id for r in reqs]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise InputError(f"{prefix}: requirements: {', '.join(twice)} defined more than once")
    checks = {c: CheckMapping(c, tuple(m["requirements"]), m["why"]) for c, m in raw["checks"].items()}
    gaps = tuple(Gap(**g) for g in raw["gaps"])
    # A reference to an undefined id would be silently dropped from every verdict.
    for where, named in [*((f"checks.{c}", m.requirements) for c, m in checks.items()),
                         *((f"gaps.{i}", (g.requirement,)) for i, g in enumerate(gaps))]:
        undefined = [r for r in named if r not in ids]
        if undefined:
            raise InputError(f"{prefix}: {where}: requirement {undefined[0]!r} is not defined under requirements")
    return Mapping(reqs, checks, gaps)


def suite_checks(suites_dir: Path | str = SUITES) -> set[str]:
    """Every check id (``<module stem>::<function>``, ``<stem>::<Class>::<method>``) in ``test_*.py`` of ``suites_dir``."""
    found: set[str] = set()
    for module in sorted(Path(suites_dir).glob("test_*.py")):
        tree = ast.parse(module.read_text(encoding="utf-8"), filename=str(module))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                found.add(f"{module.stem}::{node.name}")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                found.update(f"{module.stem}::{node.name}::{m.name}" for m in node.body
                             if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test_"))
    return found


def unmapped(mapping: Mapping, checks: Iterable[str]) -> list[str]:
    """Checks of the suites the mapping does not list: each must be mapped, if only to nothing."""
    return sorted(set(checks) - mapping.checks.keys())


def unknown(mapping: Mapping, checks: Iterable[str]) -> list[str]:
    """Entries of the mapping for checks the suites no longer have (renamed or removed)."""
    return sorted(mapping.checks.keys() - set(checks))


def check_id(nodeid: str) -> str:
    """A pytest node id (``src/dra_harness/suites/test_x.py::test_y[case]``) -> its check id (``test_x::test_y``)."""
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).stem}::{rest.split('[', 1)[0]}"


_RANK = {"skipped": 0, "passed": 1, "error": 2, "failed": 3}


def check_outcomes(results: Iterable[tuple[str, str]]) -> dict[str, str]:
    """(node id, outcome) of each test -> outcome per check: a parametrized check failed if any case failed."""
    out: dict[str, str] = {}
    for nodeid, outcome in results:
        if outcome not in _RANK:
            raise ValueError(f"{nodeid}: outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
        cid = check_id(nodeid)
        if cid not in out or _RANK[outcome] > _RANK[out[cid]]:
            out[cid] = outcome
    return out


def verdicts(mapping: Mapping, outcomes: dict[str, str], reasons: dict[str, str]) -> list[Verdict]:
    """One verdict per requirement, in the mapping's order, from each check's outcome and (skip/error) reason."""
    bad = sorted(c for c, o in outcomes.items() if o not in OUTCOMES)
    if bad:
        raise ValueError(f"outcome of {bad[0]} is {outcomes[bad[0]]!r}, not one of {', '.join(OUTCOMES)}")
    found = []
    for req in mapping.requirements:
        mapped = tuple(mapping.checks_for(req.id))
        if not mapped:
            gap = next((g for g in mapping.gaps if g.requirement == req.id), None)
            why = "no check covers it yet" + (f" (gap, {gap.reachable}: {gap.missing})" if gap else "")
            found.append(Verdict(req, "not established", why, mapped))
            continue
        by = {o: [c for c in mapped if outcomes.get(c) == o] for o in OUTCOMES}
        if by["failed"]:  # a failure is never outweighed by a pass
            found.append(Verdict(req, "not met", "failed: " + ", ".join(by["failed"]), mapped))
        elif by["passed"]:
            errored = f"; errored: {', '.join(by['error'])}" if by["error"] else ""
            found.append(Verdict(req, "met", "passed: " + ", ".join(by["passed"]) + errored, mapped))
        else:
            why = "; ".join(f"{c}: {outcomes.get(c, 'not run')}"
                            + (f" ({' '.join(reasons[c].split())})" if reasons.get(c) else "") for c in mapped)
            found.append(Verdict(req, "not established", "no mapped check passed: " + why, mapped))
    return found
