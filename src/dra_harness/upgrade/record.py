"""An upgrade's evidence on disk: ``upgrade.json`` (every step, every invariant with its breaches,
storage versions) and ``upgrade-timeline.png`` (each process's gap and the first allocation after it).

matplotlib's object API, as for the contention figures: no display needed; imported when the figure is drawn.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from dra_harness.upgrade.runner import INVARIANT_TEXT, UpgradeResult

FILE = "upgrade.json"
PLOT = "upgrade-timeline.png"


def as_dict(result: UpgradeResult) -> dict:
    invariants = result.invariants()
    return {
        "from": result.spec.from_version,
        "to": result.spec.to_version,
        "spec": asdict(result.spec),
        "held": result.held,
        "invariants": [{"name": name, "statement": INVARIANT_TEXT[name], "held": not breaches, "breaches": breaches}
                       for name, breaches in invariants.items()],
        "injected": result.injected,
        "findings": result.findings(),
        "slice_gaps": [asdict(g) for g in result.slice_gaps],
        "reboot": asdict(result.reboot) if result.reboot else None,
        "unsupported_skew": asdict(result.skew) if result.skew else None,
        "steps": [asdict(s) for s in result.steps],
        "storage": {"before": result.stored_before, "after": result.stored_after, "served_after": result.served_after},
        "timings": {k: round(v, 3) for k, v in result.timings.items()},
    }


def write(result: UpgradeResult, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    body = as_dict(result)
    (out / FILE).write_text(json.dumps(body, indent=2))
    timeline(out / PLOT, result)
    return {"json": out / FILE, "plot": out / PLOT}


def timeline(path: Path, result: UpgradeResult) -> None:
    from matplotlib.figure import Figure

    steps = result.steps
    fig = Figure(figsize=(8, 0.45 * len(steps) + 1.6), dpi=110)
    ax = fig.subplots()
    for row, s in enumerate(steps):
        colour = {"control-plane": "C0", "kubelet": "C1", "driver": "C2"}.get(s.kind, "C3")
        ax.barh(row, s.stopping_s, left=s.started_at, color=colour, height=0.6, alpha=0.4)
        ax.barh(row, s.serving_after_s, left=s.started_at + s.stopping_s, color=colour, height=0.6)
        if s.first_allocation_after_s is not None:
            ax.plot(s.started_at + s.first_allocation_after_s, row, marker="|", color="black", markersize=12)
        if any(s.broken.values()):
            ax.plot(s.started_at, row, marker="x", color="red", markersize=9)
    for g in result.slice_gaps:  # a node without its devices, on the row of the step it began in
        row = next(i for i, s in enumerate(steps) if s.process == result.step_at(g.start))
        end = g.end if g.end is not None else ax.get_xlim()[1]
        ax.plot([g.start, end], [row + 0.35, row + 0.35], color="C3", linewidth=2.5)
    ax.set_yticks(range(len(steps)), [f"{s.process} -> v{s.version}" for s in steps], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first step\npale bar: stopping; bar: down until the new one serves; |: a new claim's pod ran;\n"
                  "red line: a node publishing fewer devices than it has; x: an invariant broken", fontsize=8)
    sp = result.spec
    drivers = (f", driver v{sp.driver_from} -> v{sp.driver_to}" + (" and back" if sp.and_back else "")
               if sp.driver_from != sp.driver_to else "")
    ax.set_title(f"in-place upgrade v{sp.from_version} -> v{sp.to_version}{drivers}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
