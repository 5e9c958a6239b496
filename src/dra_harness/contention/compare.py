"""Do a scenario's verdicts survive a change of time compression?

Why: compression multiplies the control plane's latency into scenario time, so a verdict that
changes when the same scenario runs at half the compression was about this machine, not the
design. Only verdicts established at both compressions are compared; "not established" at
either says nothing either way.
"""

from __future__ import annotations

ESTABLISHED = ("meets", "misses")


def flips(first: list[dict], second: list[dict]) -> list[str]:
    """Each (design, tier) whose established verdict differs between two runs of one scenario, one line each."""
    def verdicts(results: list[dict]) -> dict[tuple[str, str], tuple[str, float]]:
        return {(r["design"], t["tier"]): (t["verdict"], r["time_compression"]) for r in results for t in r["tiers"]}

    a, b = verdicts(first), verdicts(second)
    out = []
    for key in sorted(a.keys() & b.keys()):
        (va, ca), (vb, cb) = a[key], b[key]
        if va in ESTABLISHED and vb in ESTABLISHED and va != vb:
            out.append(f"{key[0]} / {key[1]}: {va} at {ca:g}x, {vb} at {cb:g}x")
    return out
