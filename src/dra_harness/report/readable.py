"""Evidence as a reader reads it: short labelled phrases, times with units, small tables — not JSON.

Tests record evidence as flat keyword arguments (``evidence.record(node=..., evicted_after_s=0.04)``)
so that the diff gate and the JSON stay machine-readable. A reviewer signing the report should
not have to parse braces: each record becomes labelled items (``evicted after: 40 ms``), lists
become comma lists, a list of like objects becomes a table, and a time becomes ms, s, min or h
by its size. The raw JSON stays one click away in the HTML.
"""

from __future__ import annotations

import json
from typing import Any

from dra_harness.kube.types import Obj

#: Items listed before "… and N more".
MAX_ITEMS = 12
MAX_TEXT = 300
_HIDDEN = {"t"}


#: (below this many seconds, unit, seconds per unit).
_UNITS = ((1.0, "ms", 1e-3), (120.0, "s", 1.0), (7200.0, "min", 60.0), (float("inf"), "h", 3600.0))


def duration(seconds: Any, like: float | None = None) -> str:
    """0.042 -> ``42 ms``; 75 -> ``75 s``; 900 -> ``15 min``; 15970.8 -> ``4.44 h``; not a number: as it is.

    The unit follows the magnitude of ``like`` when given (a row's largest value, so a row reads in one unit).
    """
    if seconds is None:
        return "—"
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return str(seconds)
    if seconds == 0:
        return "0 s"
    _, unit, scale = next(u for u in _UNITS if abs(seconds if like is None else like) < u[0])
    value = seconds / scale
    return f"{value:.0f} {unit}" if abs(value) >= 100 else f"{value:.3g} {unit}"


def _is_time(key: str) -> bool:
    return key.endswith("_s") or key == "seconds"


def label(key: str) -> str:
    """``devices_free_after_s`` -> ``devices free after``."""
    base = key[:-2] if key.endswith("_s") else key
    return base.replace("_", " ").strip() or key


def _scalar(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    text = str(v)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"


def _listed(items: list[str], sep: str = ", ") -> str:
    if not items:
        return "none"
    more = len(items) - MAX_ITEMS
    return sep.join(items[:MAX_ITEMS]) + (f" … and {more} more" if more > 0 else "")


def text(v: Any, key: str = "") -> str:
    """Any JSON value as one line without braces: a time with its unit, ``a: 1, b: 2`` for a mapping."""
    if isinstance(v, str) and v[:1] in "{[":
        try:
            v = json.loads(v)
        except ValueError:
            pass
    if _is_time(key) and isinstance(v, (int, float)) and not isinstance(v, bool):
        return duration(v)
    if isinstance(v, dict):
        # Flat mappings read "gpu-0 2, gpu-1 1"; nested ones need the colon and a stronger separator.
        nested = any(isinstance(x, (dict, list)) for x in v.values())
        return _listed([f"{label(str(k))}{':' if nested else ''} {text(x, str(k))}" for k, x in v.items()],
                       "; " if nested else ", ")
    if isinstance(v, list):
        return _listed([f"({text(x)})" if isinstance(x, (dict, list)) else text(x) for x in v])
    return _scalar(v)


def _table(v: Any) -> Obj | None:
    """A list of two or more mappings with scalar values: columns and rows."""
    if not isinstance(v, list) or len(v) < 2 or not all(isinstance(x, dict) for x in v):
        return None
    columns = list(dict.fromkeys(k for x in v for k in x))
    if len(columns) > 8:
        return None
    return {"columns": [label(c) for c in columns],
            "rows": [[text(x.get(c), c) for c in columns] for x in v[:MAX_ITEMS * 4]]}


def items(record: Obj) -> list[Obj]:
    """``[{"label": ..., "text": ...}]``, or ``{"label": ..., "table": {...}}`` for a list of like objects."""
    out = []
    for key, value in record.items():
        if key in _HIDDEN:
            continue
        table = _table(value)
        out.append({"label": label(key), "table": table} if table else {"label": label(key), "text": text(value, key)})
    return out


def sentence(record: Obj) -> str:
    """One record on one line: ``node: gpu-node-1 · evicted after: 40 ms``."""
    parts = []
    for item in items(record):
        if "table" in item:
            rows = "; ".join(", ".join(f"{c} {v}" for c, v in zip(item["table"]["columns"], row, strict=True))
                             for row in item["table"]["rows"])
            parts.append(f"{item['label']}: {rows}")
        else:
            parts.append(f"{item['label']}: {item['text']}")
    return " · ".join(parts)
