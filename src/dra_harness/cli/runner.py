"""The main job: bring the cluster up, run every suite, write the run directory.

The cluster is brought up here rather than inside pytest so its build and start-up
progress is visible on the terminal; pytest then reuses it through the run id. The
run directory is claimed first (:mod:`.report.rundir`: a directory the run may not
write into is refused before anything starts), and written even when the suites fail
or the run is interrupted: a report marked incomplete is written before anything
starts and rewritten at the end, so even a killed run leaves one. The fingerprint is taken while the cluster is up and
before the suites disturb it.
"""

from __future__ import annotations

import logging
import os
from importlib import resources
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from dra_harness import __version__, lifetime

from dra_harness.plugin import inputs
from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.kube.client import KubeconfigError, connect
from dra_harness.providers.embedded.cluster import ClusterSpec, LocalCluster
from dra_harness.report import fingerprint
from dra_harness.report.design import load_design
from dra_harness.report.files import write_json
from dra_harness.report import rundir
from dra_harness.report.summary import finish_run, start_run, write_report


@dataclass
class RunOptions:
    provider: str = "local"
    kubeconfig: str | None = None
    context: str | None = None
    k8s_version: str = catalog.DEFAULT_KUBERNETES_VERSION
    nodes: int = 4
    gpus_per_node: int = 8
    real_nodes: int = 0
    expected_hardware: str | None = None
    driver: str | None = None
    report_dir: str | None = None
    design_file: str | None = None
    pytest_args: list[str] = field(default_factory=list)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]


def _fingerprint(options: RunOptions, cluster: LocalCluster | None, console: Console) -> dict:
    if options.provider == "kind":
        # The plugin creates the run's kind cluster inside the test session and deletes it at its end.
        why = "the run's kind cluster exists only inside the test session"
        return {"provider": "kind", "harness_version": __version__, "command": fingerprint.redacted_command(sys.argv),
                "requested_k8s_version": options.k8s_version, "kubernetes": {"error": why},
                "feature_gates": {"status": "unknown", "reason": why}}
    if cluster is not None:
        kube = cluster.kube()
        sources = {c: (lambda c=c: cluster.metrics(c)) for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")}
        build = f"dra-example-kubeletplugin v{catalog.EXAMPLE_DRIVER_VERSION}"
        extra = {"cluster": {"nodes": options.nodes, "gpus_per_node": options.gpus_per_node}}
    else:
        try:
            kube = connect(options.kubeconfig, options.context)
        except KubeconfigError as e:  # the test session reports it in one line
            return {"provider": options.provider, "harness_version": __version__, "error": str(e).splitlines()[0]}
        # Only the API server's /metrics is reachable through the API; others are "not read".
        sources = {"kube-apiserver": lambda: kube.raw("/metrics", timeout=20)}
        build, extra = None, {}
    with console.status("fingerprinting the cluster"):
        return fingerprint.collect(kube, sources, sys.argv, options.provider, driver_build=build, extra=extra)


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


def run_suites(options: RunOptions, console: Console) -> int:
    # In a checkout, its suites/ (a link into the package); installed, the package's own copy.
    root = builder.checkout_root() or Path(str(resources.files("dra_harness")))
    # Bad input is one line before anything is built, started or written (pytest checks the same again).
    design = load_design(options.design_file) if options.design_file else None
    if options.report_dir:
        rundir.check(Path(options.report_dir).resolve())  # a directory we may not write into, first: it is the user's
    inputs.check(options.provider, options.kubeconfig, options.context, options.driver, options.expected_hardware,
                 options.report_dir)
    run_id = new_run_id()
    report_dir = Path(options.report_dir or rundir.default_root() / run_id).resolve()
    # Refuses a directory it may not write into (one line), before any build or cluster work.
    start_run(report_dir, run_id, sys.argv, design)
    args = [
        sys.executable, "-m", "pytest", str(root / "suites"),
        f"--run-id={run_id}",
        f"--report-dir={report_dir}",
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
    if options.driver:
        args.append(f"--driver={options.driver}")
    if options.expected_hardware:
        args.append(f"--expected-hardware={Path(options.expected_hardware).resolve()}")
    cluster: LocalCluster | None = None
    code = 3
    previous = signal.getsignal(signal.SIGTERM)
    lifetime.terminate_as_interrupt()  # so the finally blocks below run on SIGTERM too
    try:
        if options.provider == "local":
            cluster = LocalCluster(f"run-{run_id}")
            spec = ClusterSpec(
                name=cluster.name, nodes=options.nodes, gpus_per_node=options.gpus_per_node, real_nodes=options.real_nodes,
                k8s_version=options.k8s_version, owner_pid=os.getpid(),
            )
            builder.build_all(catalog.for_cluster(options.k8s_version, real_nodes=options.real_nodes > 0))
            with console.status("bringing up the embedded cluster") as status:
                state = cluster.up(spec, say=lambda s: status.update(s))
            console.print(f"embedded cluster up in {state.timings['up']:.1f}s (Kubernetes v{options.k8s_version})")
            args += ["--cluster=local", f"--k8s-version={options.k8s_version}"]
        elif options.provider == "kind":
            # The plugin creates the run's kind cluster and deletes it at the end.
            args += ["--cluster=kind", f"--k8s-version={options.k8s_version}", f"--nodes={options.nodes}",
                     f"--gpus-per-node={options.gpus_per_node}"]
        else:
            args += ["--cluster=existing"]
            if options.kubeconfig:
                args.append(f"--kubeconfig={Path(options.kubeconfig).resolve()}")
            if options.context:
                args.append(f"--context={options.context}")
        write_json(report_dir / "fingerprint.json", _fingerprint(options, cluster, console))
        write_report(report_dir)
        code = _pytest(args + options.pytest_args, root)
    except KeyboardInterrupt:
        code = 130
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        if cluster is not None:
            cluster.down()
        path = finish_run(report_dir, complete=code in (0, 1), exit_code=code)
        console.print("sign-off report:")
        print(path, flush=True)
    return code
