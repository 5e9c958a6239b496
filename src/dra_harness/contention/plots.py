"""PNG figures: of one scenario x design run (wait CDF per tier, utilisation over time), and of
the designs side by side (p95 wait per tier against its tolerable wait).

matplotlib's object API, never pyplot: no display, no backend to choose and no global figure
state, so a figure may be drawn from any thread (CI, pytest-xdist, a caller's worker thread).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _figure(width: float, height: float) -> tuple[Figure, Any]:
    from matplotlib.figure import Figure  # a third of a second: only a run that draws pays for it

    fig = Figure(figsize=(width, height), dpi=110)
    return fig, fig.subplots()


def wait_cdf(path: Path, title: str, waits: dict[str, list[float]], tolerable: dict[str, float] | None,
             unit: float = 60.0, xlabel: str = "wait from created to running (scenario minutes; dashed: tolerable)") -> None:
    fig, ax = _figure(7, 4.2)
    for i, (tier, values) in enumerate(waits.items()):
        color = f"C{i}"
        if values:
            v = sorted(x / unit for x in values)
            ax.step(v, [(k + 1) / len(v) for k in range(len(v))], where="post", color=color, label=f"{tier} (n={len(v)})")
        if tolerable:
            ax.axvline(tolerable[tier] / unit, color=color, linestyle="--", linewidth=1)
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    _save(fig, ax, path, title)


def utilisation(path: Path, title: str, samples: list[list[float]], reserved: int = 0) -> None:
    fig, ax = _figure(7, 3.6)
    if samples:
        t = [s[0] / 3600 for s in samples]
        ax.plot(t, [s[1] for s in samples], color="C0", label="devices held")
        ax.plot(t, [s[2] for s in samples], color="grey", linestyle=":", label="devices")
        if reserved:
            ax.axhline(reserved, color="C3", linestyle="--", linewidth=1, label=f"reserved ({reserved})")
    ax.set_xlabel("scenario hours")
    ax.set_ylabel("devices")
    _save(fig, ax, path, title)


def designs(path: Path, title: str, results: list[dict]) -> None:
    """One bar per design in each tier's group: its p95 wait (scenario minutes, log scale), the tier's
    tolerable wait dashed; a tier with lost jobs is hatched, since its p95 leaves those out."""
    tiers = [t["tier"] for t in results[0]["tiers"]] if results else []
    fig, ax = _figure(7.5, 4.2)
    width = 0.8 / max(1, len(results))
    for i, r in enumerate(results):
        by = {t["tier"]: t for t in r["tiers"]}
        xs = [k + (i - (len(results) - 1) / 2) * width for k in range(len(tiers))]
        p95 = [max(0.1, (by[t]["wait_s"]["p95"] or 0) / 60) for t in tiers]
        bars = ax.bar(xs, p95, width, color=f"C{i}", label=r["design"])
        for bar, t in zip(bars, tiers, strict=True):
            if by[t]["lost"]:
                bar.set_hatch("//")
    for k, tier in enumerate(results[0]["tiers"] if results else []):
        tolerable = tier["tolerable_wait_s"] / 60
        ax.hlines(tolerable, k - 0.45, k + 0.45, colors="black", linestyles="--", linewidth=1)
    ax.set_xticks(range(len(tiers)), tiers)
    ax.set_yscale("log")
    ax.set_ylabel("p95 wait, scenario minutes (dashed: tolerable)")
    _save(fig, ax, path, title)


def _save(fig: Figure, ax: Any, path: Path, title: str) -> None:
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)


def sizing(path: Path, title: str, rows: list[dict]) -> None:
    """One bar per design: the devices it needs to meet every tier. A design that never met within the
    search is a hatched grey bar at the largest size tried, so it does not read as an answer."""
    fig, ax = _figure(7, 3.8)
    for i, r in enumerate(rows):
        largest = max((p["devices"] for p in r.get("probes") or []), default=0)
        found = r.get("devices") is not None
        height = r["devices"] if found else largest
        bar = ax.bar(i, height, 0.6, color=f"C{i}" if found else "lightgrey", hatch="" if found else "//",
                     label=r["design"])[0]
        text = f"{r['devices']} ({r['nodes']} nodes)" if found else f"> {largest}"
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, height), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), [r["design"] for r in rows])
    ax.set_ylabel("devices needed (hatched: not met)")
    _save(fig, ax, path, title)
