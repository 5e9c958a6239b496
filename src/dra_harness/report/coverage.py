"""How much a run established, and the one line that says so when it is too little to pass.

Why: "no FAIL" is not enough for exit 0. Under a namespace-label policy a run established 7 of its
93 checks (86 not established, each with the policy's words) and exited 0, so a CI gate passed a
cluster it had hardly tested. A run passes only when at least ``--min-established`` percent of its
selected checks were established (passed or failed); below it, ``run`` exits 3 with one line: how
many, the first reasons they were not, and the options the preflight named (:mod:`..checks.preflight_hints`).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from dra_harness.report import results

#: Outcomes that established something about the cluster (a FAIL is evidence too).
ESTABLISHED = ("passed", "failed", "error")


def shortfall(run_dir: Path, minimum: int) -> str | None:
    """One line when fewer than ``minimum`` percent of the run's checks were established; None otherwise."""
    rows = results.read_results(run_dir)
    done = sum(r["outcome"] in ESTABLISHED for r in rows)
    if not rows or done * 100 >= minimum * len(rows):
        return None
    reasons = Counter(_reason(r["message"]) for r in rows if r["outcome"] not in ESTABLISHED)
    first = "; ".join(f"{why} ({n})" for why, n in reasons.most_common(2))
    hints = preflight_hints(run_dir)
    return (f"established {done} of {len(rows)} checks ({100 * done // len(rows)} %), below --min-established "
            f"{minimum} %: first missing: {first}" + (f"; options that would help: {'; '.join(hints)}" if hints else ""))


def _reason(message: str) -> str:
    """A not-established message's cause, without the check's own details (the first clause, shortened)."""
    text = message.removeprefix(f"{results.NOT_ESTABLISHED}:").strip() or "no reason given"
    return text.split("; ")[0].split("\n")[0][:160]


def preflight_hints(run_dir: Path) -> list[str]:
    """The options the run's preflight named (preflight.json), as they read in its table, the first three."""
    try:
        raw = json.loads((run_dir / "preflight.json").read_text())
    except (OSError, ValueError):
        return []
    return [str(h).partition(" (")[0] for h in raw.get("hints") or []][:3] if isinstance(raw, dict) else []
