"""``dra-harness run`` (the main job) and ``dra-harness selftest`` (the project's tests).

``run`` offers the options of :mod:`dra_harness.options` (the same table the pytest plugin
declares) and hands them to the test session; anything after them goes to pytest as is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console

from dra_harness.components import background
from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.cli.common import click_option
from dra_harness.options import OPTIONS

err = Console(stderr=True)


def shared_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for o in reversed([o for o in OPTIONS if o.on_run]):
        f = click_option(o)(f)
    return f


@click.command(context_settings={"ignore_unknown_options": True})
@shared_options
@click.option("--design-file", type=click.Path(), help="YAML design record to compare with the run (see fixtures/designs/).")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def run(design_file: str | None, pytest_args: tuple[str, ...], **values: Any) -> None:
    """Run every suite against a cluster and write the sign-off report (the main job)."""
    from dra_harness.cli.runner import RunOptions, run_suites

    sys.exit(run_suites(RunOptions(values, design_file, list(pytest_args)), err))


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def selftest(pytest_args: tuple[str, ...]) -> None:
    """Run the project's own tests (unit and integration, against real embedded clusters)."""
    root = builder.checkout_root()
    if root is None:
        raise click.UsageError("selftest runs the tests of a dra-harness checkout; this one is an installed package")
    # Build first, with progress on the terminal, so the test session's timeouts never include a cold build.
    from dra_harness.components.real_node_host import unavailable_reason

    # The kubelet and containerd too where real nodes can run (their tests skip elsewhere).
    builder.build_all(catalog.for_cluster(real_nodes=unavailable_reason() is None))
    # What only some tests need builds niced beside the tests, which run those tests last.
    later = background.for_tests()
    log = builder.cache_root() / "logs" / "background.log"
    pending = background.Background(later, log)
    if pending.proc:
        err.print(f"building in the background while the tests run: "
                  f"{', '.join(c.dirname for c in later if not builder.is_cached(c))} (log {log})")
    try:
        # A test module per worker at a time (module-scoped clusters stay on one worker). Modules in collection
        # order (xdist would put the largest first): the tests whose components build in the background stay last.
        # A later `-n` in pytest_args wins. The slowest tests, named in CI's log: where its time goes.
        code = subprocess.call([sys.executable, "-m", "pytest", "tests", "-n", str(workers(bool(pending.proc))),
                                "--dist", "loadfile",
                                "--no-loadscope-reorder", "--durations=40", *pytest_args], cwd=root,
                               env={**os.environ, background.BUILDING_ENV: "1" if pending.proc else "0"})
    finally:
        pending.stop()
    if pending.proc:  # when each background build finished, beside the durations above
        err.print(f"background builds:\n{log.read_text(errors='replace')[-1500:]}")
    sys.exit(code)


def workers(building: bool) -> int:
    """Test workers for ``selftest``: three, or two while components build in the background.

    Most integration tests wait on real time (a cluster's start, a kubelet's wipe, a scenario): in a warm CI
    run the 2 cores were 46 % busy with two workers (its first five minutes) and 74-81 % with three (two whole
    runs, 26.6 and 28.5 minutes against 33-35 on two; docs/figures.md). On a cold machine the background build
    takes that idle share.
    """
    return 2 if building else 3
