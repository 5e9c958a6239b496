"""Bring a drawn shape up as a twin, run the main job against it as its ServiceAccount, and judge the run.

The judgement is the issue's: no FAIL (the example driver is healthy, so every FAIL is the
harness's), within the time allowed, nothing of others changed, nothing of the run left.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dra_harness.components.images import WORKLOAD_IMAGE
from dra_harness.providers.embedded import twin as twin_mod
from dra_harness.providers.embedded import twin_policies
from dra_harness.providers.embedded.cluster import DRIVER_NAME, ClusterSpec, LocalCluster
from dra_harness.providers.embedded.realnode import unavailable_reason
from dra_harness.report.results import read_results

ROOT = Path(__file__).resolve().parents[3]
SIMULATED_NODES, GPUS = 3, 8
#: The issue's bound for one shape's run on our 2 cores.
RUN_LIMIT_S = 300.0


def node_count() -> int:
    return SIMULATED_NODES + (1 if unavailable_reason() is None else 0)


@contextmanager
def twin_cluster(shape: twin_mod.Shape, workdir: Path) -> Iterator[tuple[LocalCluster, twin_mod.Twin]]:
    name = f"it-shape-{uuid.uuid4().hex[:6]}"
    cluster = LocalCluster(name)
    real = node_count() - SIMULATED_NODES
    cluster.up(ClusterSpec(name=name, nodes=SIMULATED_NODES, gpus_per_node=GPUS, real_nodes=real, owner_pid=os.getpid(),
                           pod_security=shape.pod_security), timeout=240)
    try:
        made = twin_mod.build(cluster, workdir, shape)
        with twin_policies.furnishing(cluster.kube(), twin_policies.furnishings(
                DRIVER_NAME, shape.limit_range, shape.device_quota)):
            yield cluster, made
    finally:
        cluster.down()


def run_main_job(made: twin_mod.Twin, report_dir: Path, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    """``dra-harness run --cluster existing`` through the twin's ServiceAccount, as a user's CI would."""
    started = time.monotonic()
    shell = [f"--shell-image={WORKLOAD_IMAGE}"] if made.shape.shell_image else []
    if made.shape.simulated_nodes:
        shell += ["--allow-contention", f"--simulated-nodes={made.shape.simulated_nodes}"]
    out = subprocess.run(
        [sys.executable, "-m", "dra_harness.cli", "run", "--cluster", "existing", "--kubeconfig", str(made.kubeconfig),
         "--expected-hardware", str(made.expected_hardware), "--allow-disruptive", "--report-dir", str(report_dir),
         "--ignore=suites/test_contention.py", *shell, *extra],
        capture_output=True, text=True, timeout=1500, cwd=ROOT)
    return out, time.monotonic() - started


@dataclass
class Judgement:
    shape: twin_mod.Shape
    seconds: float
    outcomes: Counter = field(default_factory=Counter)
    failed: dict[str, str] = field(default_factory=dict)  # test -> message
    not_established: dict[str, str] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    exit_code: int = 0

    @property
    def ok(self) -> bool:
        return not self.failed and not self.changed and not self.left and self.seconds <= RUN_LIMIT_S \
            and self.exit_code == 0

    def row(self) -> str:
        return (f"| {self.shape.seed} | {self.outcomes['passed']} | {self.outcomes['not established']} | "
                f"{self.outcomes['skipped']} | {self.outcomes['failed'] + self.outcomes['error']} | {self.seconds / 60:.1f} |")

    def explain(self) -> str:
        lines = [self.shape.describe(), f"{self.seconds:.0f}s, exit {self.exit_code}, {dict(self.outcomes)}"]
        lines += [f"FAIL {t}: {m[:300]}" for t, m in self.failed.items()]
        lines += [f"changed: {c}" for c in self.changed] + [f"left: {x}" for x in self.left]
        return "\n".join(lines)


def judge(cluster: LocalCluster, made: twin_mod.Twin, report_dir: Path) -> Judgement:
    """Run the main job (``shape.runs`` of them at once, each with its own report) and judge them together."""
    kube = cluster.kube()
    before = twin_mod.others(kube)
    dirs = [report_dir] if made.shape.runs == 1 else [report_dir / f"run-{i}" for i in range(made.shape.runs)]
    with ThreadPoolExecutor(len(dirs)) as pool:
        runs = list(pool.map(lambda d: run_main_job(made, d), dirs))
    j = Judgement(made.shape, max(took for _, took in runs))
    for i, (d, (out, _)) in enumerate(zip(dirs, runs, strict=True)):
        rows = read_results(d)
        prefix = f"run {i}: " if len(dirs) > 1 else ""
        j.outcomes.update(r["outcome"] for r in rows)
        j.exit_code = j.exit_code or out.returncode
        j.failed.update({prefix + r["nodeid"]: r["message"] for r in rows if r["outcome"] in ("failed", "error")})
        j.not_established.update({prefix + r["nodeid"]: r["message"] for r in rows if r["outcome"] == "not established"})
        if not rows or out.returncode != 0:
            j.failed.setdefault(f"{prefix}run", (out.stdout + out.stderr)[-1500:])
    j.changed = twin_mod.changed(before, twin_mod.others(kube))
    j.left = twin_mod.leftovers(kube)
    return j
