"""PNG figures of one scenario x design run: wait CDF per tier, utilisation over time.

matplotlib with the Agg backend: no display, safe in CI and under pytest-xdist.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after choosing the backend


def wait_cdf(path: Path, title: str, waits: dict[str, list[float]], tolerable: dict[str, float] | None,
             unit: float = 60.0, xlabel: str = "wait from created to running (scenario minutes; dashed: tolerable)") -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
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
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    if samples:
        t = [s[0] / 3600 for s in samples]
        ax.plot(t, [s[1] for s in samples], color="C0", label="devices held")
        ax.plot(t, [s[2] for s in samples], color="grey", linestyle=":", label="devices")
        if reserved:
            ax.axhline(reserved, color="C3", linestyle="--", linewidth=1, label=f"reserved ({reserved})")
    ax.set_xlabel("scenario hours")
    ax.set_ylabel("devices")
    _save(fig, ax, path, title)


def _save(fig, ax, path: Path, title: str) -> None:
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
