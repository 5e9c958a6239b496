"""The user's YAML files (hardware, design, profiles, scenarios): read, check, fail in one line.

Why a module of its own: every file a user hands the harness must fail the same way,
naming the file, the field and the problem on one line and never with a traceback, and
durations must mean the same thing in a design file as in a scenario.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "": 1}


def load(path: Path | str, error: type[ValueError], prefix: str) -> Any:
    """The parsed document, or ``error("<prefix>: <why>")`` for an unreadable or malformed file."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise error(f"{prefix}: cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or e.__class__.__name__
        raise error(f"{prefix}:{where} is not valid YAML: {problem}") from None


def field_path(err: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in err.absolute_path) or "(top level)"


def validate(data: Any, schema: dict, error: type[ValueError], prefix: str) -> None:
    """Raise ``error("<prefix>: <field>: <problem>")`` for the first schema violation."""
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError as e:
        raise error(f"{prefix}: {field_path(e)}: {e.message[:300]}") from None


def seconds(value: float | str) -> float:
    """``90``, ``"90s"``, ``"5m"``, ``"2h"``, ``"1d"`` -> seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", value)
    if not m:
        raise ValueError(f"not a duration: {value!r}")
    return float(m.group(1)) * _UNITS[m.group(2) or ""]
