"""The main job: bring the cluster up, run every suite, write the run directory.

The cluster is brought up here rather than inside pytest so its build and start-up
progress is visible on the terminal; pytest then reuses it through the run id. The
run directory is claimed first (:mod:`.report.rundir`: a directory the run may not
write into is refused before anything starts), and written even when the suites fail
or the run is interrupted: a report marked incomplete is written before anything
starts and rewritten at the end, so even a killed run leaves one. The fingerprint is taken while the cluster is up and
before the suites disturb it, on a shared cluster under a shared Lease (never during another run's drain).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
import uuid
from contextlib import nullcontext
from importlib import resources
from dataclasses import dataclass, field
from typing import Any
from pathlib import Path

from rich.console import Console

from dra_harness import __version__, heartbeat, lifetime

from dra_harness.plugin import inputs
from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.errors import LockLost, LockTimeout, one_line
from dra_harness.kube.client import KubeconfigError
from dra_harness import providers
from dra_harness.options import RunConfig, cluster_rules, to_pytest_args
from dra_harness.providers.base import Provider
from dra_harness.providers.lock import ClusterLock
from dra_harness.components.real_node_host import choose_real_nodes
from dra_harness.report import coverage, fingerprint
from dra_harness.report.design import load_design
from dra_harness.report.files import write_json
from dra_harness.report import rundir
from dra_harness.report.summary import finish_run, start_run, write_report


@dataclass
class RunOptions:
    """The run's options by dest (:mod:`dra_harness.options`), and what only ``run`` takes."""

    values: dict[str, Any] = field(default_factory=dict)
    design_file: str | None = None
    pytest_args: list[str] = field(default_factory=list)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]


def _fingerprint(provider: Provider, console: Console, run_id: str) -> dict:
    try:
        sources = provider.fingerprint_sources()
    except KubeconfigError as e:  # the test session reports it in one line
        return {"provider": provider.name, "harness_version": __version__, "error": str(e).splitlines()[0]}
    if isinstance(sources, str):  # why the cluster cannot be read before the session
        return {"provider": provider.name, "harness_version": __version__, "command": fingerprint.redacted_command(sys.argv),
                "requested_k8s_version": provider.config.k8s_version or catalog.DEFAULT_KUBERNETES_VERSION,
                "kubernetes": {"error": sources}, "feature_gates": {"status": "unknown", "reason": sources}}
    kube, metrics, build, extra = sources
    # On a cluster other runs share, read under a shared Lease: never in the middle of another run's drain.
    lock = (ClusterLock(kube, run_id, provider.config.lease_namespace, lease_s=provider.config.lease_seconds)
            if provider.outlives_run else None)
    try:
        with heartbeat.status(console, "fingerprinting the cluster"), lock.shared() if lock else nullcontext():
            return fingerprint.collect(kube, metrics, sys.argv, provider.name, driver_build=build, extra=extra)
    except (LockTimeout, LockLost) as e:  # the suites' tests say the same, each not established
        return {"provider": provider.name, "harness_version": __version__, "error": f"not fingerprinted: {one_line(e)}"}
    finally:
        if lock is not None:
            lock.close()


def _pytest(args: list[str], cwd: Path) -> int:
    """Run the suites; on an interrupt, let pytest clean up its run (SIGINT) before giving up on it."""
    # pytest ends with us, however we end (kill -9 included): it gets SIGTERM, which it treats as Ctrl-C.
    proc = subprocess.Popen(args, cwd=cwd, preexec_fn=lifetime.die_with_parent())
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)  # a terminal's Ctrl-C has sent it already; SIGTERM to us has not
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


#: Options whose values are paths: resolved here, because the test session runs in another directory.
_PATHS = ("kubeconfig", "expected_hardware", "report_dir")


def run_suites(options: RunOptions, console: Console) -> int:
    # In a checkout, its suites/ (a link into the package); installed, the package's own copy.
    root = builder.checkout_root() or Path(str(resources.files("dra_harness")))
    values = {k: str(Path(v).resolve()) if k in _PATHS and v else v for k, v in options.values.items()}
    run_id = new_run_id()
    # Bad input is one line before anything is built, started or written (pytest checks the same again).
    design = load_design(options.design_file) if options.design_file else None
    if values.get("report_dir"):
        rundir.check(Path(values["report_dir"]))  # a directory we may not write into, first: it is the user's
    chosen = providers.registry()[values.get("cluster") or "local"]
    if chosen.starts_real_nodes and values.get("real_nodes") is None and not values.get("cluster_name"):
        # The fullest evidence this machine allows: containers checked on a real node unless it cannot run one.
        values["real_nodes"] = choose_real_nodes(None, lambda line: console.print(line, highlight=False))
    provider = providers.create(RunConfig.of(values), run_id)
    inputs.check(provider, values.get("report_dir"))
    report_dir = Path(values.get("report_dir") or rundir.default_root() / run_id).resolve()
    # Refuses a directory it may not write into (one line), before any build or cluster work.
    start_run(report_dir, run_id, sys.argv, design)
    values["report_dir"] = str(report_dir)
    args = [
        sys.executable, "-m", "pytest", str(root / "suites"),
        f"--run-id={run_id}",
        *to_pytest_args(values),
        f"--junitxml={report_dir / 'junit.xml'}",
        f"--alluredir={report_dir / 'allure-results'}",
        f"--rootdir={root}",  # node ids read suites/test_x.py::test_y wherever the package lives
        "-p", "no:cacheprovider",
        "-p", "no:locust",  # locust's own pytest plugin; our ini says the same in a checkout
        "-o", "junit_family=xunit2",
    ]
    level = logging.getLogger("dra_harness").level
    if logging.NOTSET < level < logging.WARNING:  # `dra-harness -v run`: pytest's live log shows the same lines
        args.append(f"--log-cli-level={logging.getLevelName(level)}")
    code, too_little = 3, False
    previous = signal.getsignal(signal.SIGTERM)
    lifetime.terminate_as_interrupt()  # so the finally blocks below run on SIGTERM too
    try:
        # Brought up here, where its build and start-up progress shows; the session reuses it by run id.
        provider.prepare(console)
        fp = _fingerprint(provider, console, run_id)
        if rules := cluster_rules(provider.config).describe():
            fp["cluster_rules"] = rules  # the report's provenance says which rules the run followed
        write_json(report_dir / "fingerprint.json", fp)
        write_report(report_dir)
        code = _pytest(args + options.pytest_args, root)
        if code == 0 and (short := coverage.shortfall(report_dir, provider.config.min_established)):
            console.print(f"tested too little: {short}", highlight=False, markup=False, soft_wrap=True)
            code, too_little = 3, True  # a complete run that established too little: not an interrupted one
    except KeyboardInterrupt:
        code = 130
        raise
    finally:
        with lifetime.cleaning_up():  # a SIGTERM now would leave the cluster up and the report unwritten
            if not provider.outlives_run:
                provider.close()
            path = finish_run(report_dir, complete=code in (0, 1) or too_little, exit_code=code)
        signal.signal(signal.SIGTERM, previous)
        if hints := coverage.preflight_hints(report_dir):
            console.print(f"options that would let more checks run on this cluster: {'; '.join(hints)}",
                          highlight=False, markup=False, soft_wrap=True)
        console.print("sign-off report:")
        if code not in (0, 1):
            print(flush=True)  # an interrupted pytest may have left its progress line unfinished on our stdout
        print(path, flush=True)
    return code
