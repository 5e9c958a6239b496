"""Upstream's own DRA scheduling benchmark, run on this machine: the bar for the harness's figures.

scheduler_perf (``k8s.io/kubernetes/test/integration/scheduler_perf/dra``) starts etcd, an
in-process API server and kube-scheduler, writes nodes, ResourceSlices and pre-allocated
claims straight into the API, creates pods from a claim template and samples how many are
scheduled each second. Its ``SchedulingThroughput`` on the same machine and Kubernetes
version is what ``bench compare`` divides the harness's rate by: the same work with no
kubelet, no controller-manager process and no client of ours in the way.

It is a ``go test`` of a package inside the Kubernetes module. That only builds from a
module that replaces every staging module with its published tag, which is exactly the
components' wrapper module; the build runs in a private copy of it (``go test`` may add the
test's own dependencies to go.mod) and the test binary is cached per version. etcd comes
from the components cache, as for the embedded cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dra_harness.bench.throughput import Throughput
from dra_harness.components import build, catalog
from dra_harness.components.gomod import GO_ENV, module_source
from dra_harness.errors import BuildError

PACKAGE = "k8s.io/kubernetes/test/integration/scheduler_perf/dra"
TESTCASE = "SchedulingWithResourceClaimTemplate"
#: Upstream's workloads of that test case (names as in its performance-config.yaml).
WORKLOADS = ("fast", "2000pods_200nodes", "5000pods_500nodes")
#: The work of each, for the harness's side of ``bench compare``: nodes, devices per node, pre-allocated claims, measured pods.
WORK = {"fast": (1, 10, 0, 10), "2000pods_200nodes": (200, 10, 1000, 1000), "5000pods_500nodes": (500, 10, 2500, 2500)}


class SchedulerPerfError(BuildError):
    """scheduler_perf failed to build or run, or wrote no throughput; the message ends with its log's tail."""


def test_binary(version: str, say: Callable[[str], None]) -> Path:
    """The cached scheduler_perf DRA test binary for Kubernetes ``version``, built on first use."""
    component = catalog.kubernetes(version)
    target = build.cache_root() / "bench" / f"scheduler-perf-v{version}" / build.go_version() / "dra.test"
    with build.lock(build.cache_root() / "locks" / f"scheduler-perf-v{version}.lock"):
        if target.is_file():
            return target
        say(f"building scheduler_perf's DRA benchmark from k8s.io/kubernetes v{version} (once per version; minutes)")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="dra-harness-schedperf-") as tmp:
            for name in ("go.mod", "go.sum"):
                shutil.copy(component.module_dir() / name, Path(tmp) / name)
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".partial")
            # -trimpath like the components' builds, so the Go build cache they filled serves most packages.
            argv = ["go", "test", "-c", "-trimpath", "-ldflags=-s -w", "-o", str(partial), PACKAGE]
            proc = subprocess.run(argv, cwd=tmp, env={**os.environ, **GO_ENV}, capture_output=True, text=True)
            if proc.returncode != 0 or not partial.is_file():
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
                raise SchedulerPerfError(f"go test -c {PACKAGE} failed (exit {proc.returncode}):\n{tail}")
            partial.rename(target)
        say(f"built in {time.monotonic() - started:.0f} s: {target}")
        return target


def run(version: str, workload: str, out: Path, say: Callable[[str], None], timeout: float = 3600) -> Throughput | None:
    """Run one workload; return its SchedulingThroughput (pods/s) and keep its data file and log in ``out``."""
    if workload not in WORKLOADS:
        raise SchedulerPerfError(f"unknown scheduler_perf workload {workload!r} (one of {', '.join(WORKLOADS)})")
    binary = test_binary(version, say)
    try:
        etcd = build.build(catalog.ETCD).binary("etcd")
        module_root = module_source(catalog.kubernetes(version))  # <GOMODCACHE>/k8s.io/kubernetes@v<version>
    except BuildError as e:
        raise SchedulerPerfError(str(e)) from e
    package_dir = module_root / "test" / "integration" / "scheduler_perf" / "dra"
    out.mkdir(parents=True, exist_ok=True)
    data = Path(tempfile.mkdtemp(prefix="data-", dir=out))
    argv = [str(binary), "-test.run=^$", f"-test.bench=^BenchmarkPerfScheduling$/^{TESTCASE}$/^{workload}$",
            "-test.benchtime=1x", "-test.short=false", f"-test.timeout={int(timeout)}s",
            "-perf-scheduling-label-filter=", f"-data-items-dir={data}"]
    env = {**os.environ, "PATH": f"{etcd.parent}:{os.environ.get('PATH', '')}", "ARTIFACTS": str(out),
           "KUBE_CACHE_MUTATION_DETECTOR": "false", "ETCD_LOGLEVEL": "warn",
           # A -trimpath build's test API server finds its certificates under TEST_SRCDIR/TEST_WORKSPACE/<module@version>/...
           "TEST_SRCDIR": str(module_root.parent.parent), "TEST_WORKSPACE": "."}
    say(f"running scheduler_perf {TESTCASE}/{workload} (Kubernetes v{version})")
    log = out / f"scheduler-perf-{workload}.log"
    with open(log, "w") as f:  # the test's cwd is its package: it reads its config and templates from there
        proc = subprocess.run(argv, cwd=package_dir, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout + 60)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-10:])
        raise SchedulerPerfError(f"scheduler_perf {workload} exited {proc.returncode}; log {log}:\n{tail}")
    return parse_data_items(data)  # None: all scheduled within one sampling second (upstream then records none)


def parse_data_items(directory: Path) -> Throughput | None:
    """SchedulingThroughput from the data-items JSON scheduler_perf writes (perf-dash's format)."""
    for path in sorted(directory.glob("*.json")):
        try:
            items = json.loads(path.read_text()).get("dataItems") or []
        except (OSError, ValueError):
            continue
        for item in items:
            if (item.get("labels") or {}).get("Metric") == "SchedulingThroughput" and item.get("data"):
                d = item["data"]
                return Throughput(Average=d["Average"], Perc50=d["Perc50"], Perc90=d["Perc90"],
                                  Perc95=d.get("Perc95", d["Perc90"]), Perc99=d["Perc99"], samples=0)
    return None
