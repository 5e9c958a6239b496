"""The main job: bring the cluster up, run every suite, write the run directory.

The cluster is brought up here rather than inside pytest so its build and start-up
progress is visible on the terminal; pytest then reuses it through the run id. The
run directory is written even when the suites fail or the run is interrupted: a
report marked incomplete beats no report.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from .components import build as builder
from .components import catalog
from .local.cluster import ClusterSpec, LocalCluster
from .signoff import write_signoff


@dataclass
class RunOptions:
    provider: str = "local"
    kubeconfig: str | None = None
    context: str | None = None
    k8s_version: str = catalog.DEFAULT_KUBERNETES_VERSION
    nodes: int = 4
    gpus_per_node: int = 8
    expected_hardware: str | None = None
    driver: str | None = None
    report_dir: str | None = None
    pytest_args: list[str] = field(default_factory=list)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]


def run_suites(options: RunOptions, console: Console) -> int:
    root = builder.repo_root()
    run_id = new_run_id()
    report_dir = Path(options.report_dir or root / "reports" / "out" / run_id).resolve()
    report_dir.mkdir(parents=True, exist_ok=True)
    args = [
        sys.executable, "-m", "pytest", str(root / "suites"),
        f"--run-id={run_id}",
        f"--report-dir={report_dir}",
        f"--junitxml={report_dir / 'junit.xml'}",
        f"--alluredir={report_dir / 'allure-results'}",
        "-p", "no:cacheprovider",
        "-o", "junit_family=xunit2",
    ]
    if options.driver:
        args.append(f"--driver={options.driver}")
    if options.expected_hardware:
        args.append(f"--expected-hardware={Path(options.expected_hardware).resolve()}")
    cluster: LocalCluster | None = None
    started = time.time()
    code = 3
    try:
        if options.provider == "local":
            cluster = LocalCluster(f"run-{run_id}")
            spec = ClusterSpec(
                name=cluster.name, nodes=options.nodes, gpus_per_node=options.gpus_per_node,
                k8s_version=options.k8s_version, owner_pid=os.getpid(),
            )
            builder.build_all(catalog.for_cluster(options.k8s_version))
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
        code = subprocess.call(args + options.pytest_args, cwd=root)
    except KeyboardInterrupt:
        code = 130
        raise
    finally:
        if cluster is not None:
            cluster.down()
        path = write_signoff(report_dir, run_id=run_id, command=sys.argv, started=started,
                             complete=code in (0, 1), exit_code=code)
        console.print("sign-off report:")
        print(path, flush=True)
    return code
