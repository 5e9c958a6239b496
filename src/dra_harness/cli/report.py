"""``dra-harness report`` and ``dra-harness diff``: re-render a run, and gate an upgrade on two runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click


@click.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--allure", "allure_html", is_flag=True,
              help="Also generate the Allure HTML report (allure-report/index.html, one file) with the Allure command "
                   "line, installed on first use, and print its path last.")
def report(run_dir: Path, allure_html: bool) -> None:
    """Re-render a run directory's summary.json, signoff.md, signoff.html and Allure extras."""
    from dra_harness.report import allure_html as allure_report
    from dra_harness.report import write_report

    if allure_html:
        allure_report.require_results(run_dir)  # before re-rendering, which would create an empty allure-results/
    click.echo(str(write_report(run_dir)))
    if allure_html:
        click.echo(str(allure_report.generate(run_dir)))


@click.command()
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("candidate", type=click.Path(path_type=Path))
@click.option("--max-slowdown", default=0.5, show_default=True, type=click.FloatRange(0),
              help="A timing regresses when it grows by more than this fraction...")
@click.option("--min-delta", default=1.0, show_default=True, type=click.FloatRange(0),
              help="...and by more than this many seconds.")
@click.option("--max-wait-increase", default=0.25, show_default=True, type=click.FloatRange(0),
              help="A contention wait regresses when it grows by more than this fraction...")
@click.option("--min-wait-delta", default=60.0, show_default=True, type=click.FloatRange(0),
              help="...and by more than this many scenario seconds.")
@click.option("--accept-missing", is_flag=True,
              help="Accept checks that passed in BASE but were skipped, absent or not established in CANDIDATE, "
                   "and a lower check count (listed as changes instead of regressions).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def diff(base: Path, candidate: Path, max_slowdown: float, min_delta: float, max_wait_increase: float,
         min_wait_delta: float, accept_missing: bool, as_json: bool) -> None:
    """Compare two runs (directories or summary.json); exit 1 on a regression: the pre-upgrade gate."""
    from dra_harness.report.diff import Thresholds, compare, load, text

    result = compare(load(base), load(candidate), Thresholds(max_slowdown, min_delta, max_wait_increase, min_wait_delta),
                     accept_missing=accept_missing)
    click.echo(json.dumps(result.as_dict(), indent=2) if as_json else text(result))
    sys.exit(1 if result.failed else 0)
