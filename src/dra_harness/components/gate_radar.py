"""The gate radar: every DRA feature gate of every release the harness runs is either exercised by a named check or
listed as not covered, with the reason (``data/gate-coverage.yaml``).

Why: a new release brings DRA gates (1.38.0-beta.0 locks four on and drops ``DynamicResourceAllocation``); a run
that passes on it says nothing about a gate no check touches. The radar makes that visible where it is cheap: a
unit test fails until each new gate is mapped or listed, and the mapping names checks that exist.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_harness import data, yamlfile
from dra_harness.components import gates
from dra_harness.errors import InputError

COVERAGE = data.path("gate-coverage.yaml")
#: DRA's gates: their names start so (the DRA-adjacent ones the table carries are listed by name).
_PREFIXES = ("DRA", "DynamicResource")
_ADJACENT = ("GenericWorkload", "KubeletPodResourcesDynamicResources", "ResourceHealthStatus", "ResourceHealthStatusMessage")


@dataclass(frozen=True)
class Coverage:
    checks: dict[str, list[str]]  # gate -> suite nodeids
    not_covered: dict[str, str]  # gate -> why


def load(path: Path = COVERAGE) -> Coverage:
    raw: Any = yamlfile.load(path, InputError, path.name)
    checks: dict[str, list[str]] = {}
    missing: dict[str, str] = {}
    for gate, entry in ((raw or {}).get("gates") or {}).items():
        if "check" in entry:
            checks[gate] = list(entry["check"])
        else:
            missing[gate] = str(entry["not_covered"])
    return Coverage(checks, missing)


def dra_gates(table: dict[str, Any]) -> dict[str, list[str]]:
    """Each DRA gate of the table (turned on, or locked on) -> the releases that have it."""
    out: dict[str, list[str]] = {}
    for version, row in table.items():
        for gate in [*row.get("feature_gates", {}), *row.get("dra_gates_locked_on", [])]:
            if gate.startswith(_PREFIXES) or gate in _ADJACENT:
                out.setdefault(gate, []).append(version)
    return out


def unmapped(table: dict[str, Any] | None = None, coverage: Coverage | None = None) -> list[str]:
    """The gates neither mapped to a check nor listed as not covered, one line each with their releases."""
    coverage = coverage or load()
    known = set(coverage.checks) | set(coverage.not_covered)
    return [f"{gate} ({', '.join(versions)})" for gate, versions in sorted(dra_gates(table or gates.table()).items())
            if gate not in known]


def missing_checks(coverage: Coverage | None = None, root: Path | None = None) -> list[str]:
    """Mapped checks whose test function does not exist in its suite file."""
    coverage = coverage or load()
    root = root or Path(data.__file__).resolve().parents[1] / "suites"
    out = []
    for gate, nodeids in sorted(coverage.checks.items()):
        for nodeid in nodeids:
            file, _, name = nodeid.partition("::")
            path = root / Path(file).name
            tests = {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)} \
                if path.is_file() else set()
            if name not in tests:
                out.append(f"{gate}: {nodeid}")
    return out
