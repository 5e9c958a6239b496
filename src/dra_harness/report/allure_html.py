"""``dra-harness report RUN_DIR --allure``: the Allure HTML report of a run, by the Allure command line.

``allure generate --single-file`` turns ``allure-results/`` (allure-pytest's results, with
the extras of :mod:`.allure_extra`) into ``allure-report/index.html``, one file that a
browser opens from ``file://``. The report is part of the run's layout, so the run
directory's marker records it and a later run in the same directory replaces it.
"""

from __future__ import annotations

from pathlib import Path

from dra_harness.components import allure
from dra_harness.report import rundir
from dra_harness.report.files import RunDirError

RESULTS = "allure-results"
REPORT = "allure-report"


def require_results(run_dir: Path) -> Path:
    """``RUN_DIR/allure-results`` when it holds allure-pytest's results; RunDirError (one line) otherwise."""
    results = Path(run_dir) / RESULTS
    if not Path(run_dir).is_dir():
        raise RunDirError(f"{run_dir} is not a directory")
    if not results.is_dir():
        raise RunDirError(f"{results} does not exist: the run wrote no Allure results "
                          f"(dra-harness run writes them; pytest needs --alluredir {results})")
    if not any(results.glob("*-result.json")):
        raise RunDirError(f"{results} holds no Allure test results (*-result.json): nothing to generate a report from")
    return results


def generate(run_dir: Path) -> Path:
    """Generate ``RUN_DIR/allure-report/index.html`` from the run's Allure results; return its path."""
    results = require_results(run_dir)
    out = Path(run_dir) / REPORT
    allure.generate(results, out)
    index = out / "index.html"
    rundir.record(Path(run_dir), [index])
    return index
