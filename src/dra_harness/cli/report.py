"""``dra-harness report``, ``diff`` and ``compare``: re-render a run, gate an upgrade on two runs, show several side by side."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click


@click.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--pdf", "with_pdf", is_flag=True,
              help="Also print signoff.pdf with headless Chromium (installed as a prerequisite when root).")
@click.option("--allure", "allure_html", is_flag=True,
              help="Also generate the Allure HTML report (allure-report/index.html, one file) with the Allure command "
                   "line, installed on first use, and print its path last.")
@click.option("--bundle", "with_bundle", is_flag=True,
              help="Also write conformance-bundle.tar.gz: the conformance verdicts, JUnit, fingerprint, provenance, the "
                   "evidence behind each verdict and SHA256SUMS, the same bytes from the same run directory.")
def report(run_dir: Path, with_pdf: bool, allure_html: bool, with_bundle: bool) -> None:
    """Re-render a run directory's summary.json, signoff.md, signoff.html and Allure extras (and signoff.pdf)."""
    from dra_harness.report import allure_html as allure_report
    from dra_harness.report import write_report
    from dra_harness.report.pdf import FILE, PdfError
    from dra_harness.report.summary import write_pdf

    if allure_html:
        allure_report.require_results(run_dir)  # before re-rendering, which would create an empty allure-results/
    html = write_report(run_dir)
    # A PDF the run printed is reprinted, so it never disagrees with the HTML beside it.
    if with_pdf or (run_dir / FILE).is_file():
        if with_pdf:
            from dra_harness.components import prereqs

            prereqs.ensure(["chromium"], "printing signoff.pdf")
        if write_pdf(run_dir) is None:
            raise PdfError(f"{run_dir / FILE} not printed: see the warning above")
    click.echo(str(html))
    if with_bundle:
        from dra_harness.report import bundle

        click.echo(str(bundle.write(run_dir)))
    if allure_html:
        click.echo(str(allure_report.generate(run_dir)))


def _patterns(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """--accept-missing globs: one that is empty or spans lines cannot name a check."""
    for v in values:
        if not v.strip() or "\n" in v:
            raise click.BadParameter(f"{v!r} is not a glob over check nodeids (e.g. 'suites/test_device_taints.py::*')")
    return values


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
@click.option("--accept-missing", "accept_missing", multiple=True, metavar="PATTERN", callback=_patterns,
              help="Accept the checks whose nodeid matches this glob (fnmatch, e.g. 'suites/test_device_taints.py::*') "
                   "that passed in BASE but were skipped, absent or not established in CANDIDATE, the contention designs "
                   "and tiers (contention::SCENARIO::DESIGN[::TIER]) that met their waits in BASE but are gone or not "
                   "established in CANDIDATE, and a lower check count when every absent check matches: listed as "
                   "changes, with what each pattern accepted. Repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def diff(base: Path, candidate: Path, max_slowdown: float, min_delta: float, max_wait_increase: float,
         min_wait_delta: float, accept_missing: tuple[str, ...], as_json: bool) -> None:
    """Compare two runs (directories or summary.json); exit 1 on a regression: the pre-upgrade gate."""
    from dra_harness.report.diff import Thresholds, compare, load, text

    result = compare(load(base), load(candidate), Thresholds(max_slowdown, min_delta, max_wait_increase, min_wait_delta),
                     accept_missing=accept_missing)
    click.echo(json.dumps(result.as_dict(), indent=2) if as_json else text(result))
    sys.exit(1 if result.failed else 0)


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Directory for compare.html and compare.md (default: compare-<UTC time> in the current directory).")
@click.option("--label", "labels", multiple=True, help="A column title, once per run in the same order (default: the run ids).")
def compare(runs: tuple[Path, ...], out: Path | None, labels: tuple[str, ...]) -> None:
    """Several runs (directories or summary.json) side by side: drivers, versions, clusters or designs, check by check,
    differences highlighted; writes compare.html and compare.md and prints the HTML's path."""
    from dra_harness.report import compare as side_by_side

    if len(runs) < 2:
        raise click.UsageError(f"compare needs at least two runs, got {len(runs)}")
    if labels and len(labels) != len(runs):
        raise click.UsageError(f"{len(labels)} --label for {len(runs)} runs: give one per run, or none")
    # The current directory, not beside the runs: runs live in reports/out/<run-id>, and a compare written there would
    # be swept up by the next `compare reports/out/*`; a timestamp never overwrites an earlier comparison.
    out = out or Path(time.strftime("compare-%Y%m%d-%H%M%S", time.gmtime()))
    table = side_by_side.build(side_by_side.load_runs(list(runs)), list(labels) or None)
    click.echo(str(side_by_side.write(out, table)))
