"""Run more staging twins than CI does: ``python -m tests.integration.twins [--seed N] [--shapes K]``.

Prints each shape, its judgement and a table row (seed, passed, not established, skipped, failed, minutes, and
what the fault did). ``--fault F`` injects F whatever the seed draws; ``--old RULE`` puts one rule of the harness
back as before #34, so the shape must fail (a negative control, by hand).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from dra_harness.providers.embedded.twin import FAULTS
from tests.integration.twins import run, shapes
from tests.integration.twins.hooks import OLD_RULES


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.integration.twins")
    parser.add_argument("--seed", type=int, default=shapes.daily_seed(), help="first seed (default: today's)")
    parser.add_argument("--shapes", type=int, default=3, help="how many shapes, seeds SEED, SEED+1, ...")
    parser.add_argument("--keep", type=Path, help="keep each run's report directory under this one")
    parser.add_argument("--fault", choices=("none", *FAULTS), help="inject this fault whatever the seed draws")
    parser.add_argument("--old", choices=OLD_RULES, default="",
                        help="put this rule of the harness back as before #34 (a negative control: the shape must fail)")
    args = parser.parse_args(argv)
    print("| seed | passed | not established | skipped | failed | minutes |\n|---|---|---|---|---|---|", flush=True)
    bad = 0
    for seed in range(args.seed, args.seed + args.shapes):
        shape = shapes.draw(seed, run.node_count(), run.GPUS)
        if args.fault:
            shape = shapes.with_fault(shape, "" if args.fault == "none" else args.fault, run.node_count())
        print(shape.describe(), flush=True)
        with tempfile.TemporaryDirectory(prefix="dra-harness-shape-") as tmp:
            with run.twin_cluster(shape, Path(tmp) / "twin") as (cluster, made):
                judgement = run.judge(cluster, made, (args.keep / str(seed)) if args.keep else Path(tmp) / "run",
                                      args.old)
        print(judgement.row(), flush=True)
        if not judgement.ok:
            bad += 1
            print(judgement.explain(), file=sys.stderr, flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
