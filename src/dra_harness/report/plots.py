"""Plots for the sign-off report, as PNG bytes (matplotlib's object API: no display, no pyplot state).

The HTML embeds every image as a data URI so the report stays one file that can be
mailed or attached to a ticket. matplotlib is imported when a plot is drawn: a third of
a second every command would pay otherwise.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

from dra_harness.kube.types import Obj
from dra_harness.report.reading import present, read_bytes


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def file_uri(path: Path) -> str | None:
    """A PNG of the run as a data URI; None when there is none (a link or FIFO there is refused by the reader)."""
    if not present(path):
        return None
    data = read_bytes(path, "plot")
    return data_uri(data) if data.startswith(b"\x89PNG") else None


def _subplots(figsize: tuple[float, float]) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots()


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return buf.getvalue()


def design_comparison(rows: list[Obj], scenario: str) -> bytes | None:
    """p95 wait per tier, one bar per design, with each tier's tolerable wait as a marker."""
    rows = [r for r in rows if r["scenario"] == scenario and isinstance(r.get("p95"), (int, float))]
    if not rows:
        return None
    tiers = list(dict.fromkeys(r["tier"] for r in rows))
    designs = list(dict.fromkeys(r["design"] for r in rows))
    fig, ax = _subplots((7, 3.2))
    width = 0.8 / len(designs)
    for i, design in enumerate(designs):
        xs, ys = [], []
        for j, tier in enumerate(tiers):
            match = [r for r in rows if r["design"] == design and r["tier"] == tier]
            if match:
                xs.append(j + i * width)
                ys.append(match[0]["p95"])
        ax.bar(xs, ys, width, label=design)
    for j, tier in enumerate(tiers):
        tol = next((r["tolerable"] for r in rows if r["tier"] == tier and r.get("tolerable") is not None), None)
        if tol is not None:
            ax.hlines(tol, j - width / 2, j + 0.8 - width / 2, colors="black", linestyles="dashed")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(tiers))], tiers)
    ax.set_ylabel("p95 wait (scenario s)")
    ax.set_title(f"{scenario}: p95 wait per tier and design (dashed: tolerable)")
    ax.legend(fontsize="small")
    return _png(fig)


def durations(results: list[Obj]) -> bytes | None:
    """Seconds per concern: where the run's time went."""
    totals: dict[str, float] = {}
    for r in results:
        totals[r["concern"]] = totals.get(r["concern"], 0.0) + r["seconds"]
    if not totals:
        return None
    fig, ax = _subplots((7, 2.4))
    names = list(totals)
    ax.barh(names, [totals[n] for n in names], color="#0969da")
    ax.set_xlabel("seconds")
    ax.invert_yaxis()
    ax.set_title("test time per concern")
    return _png(fig)
