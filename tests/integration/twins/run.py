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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dra_harness.components.images import WORKLOAD_IMAGE
from dra_harness.providers import run_records
from dra_harness.providers.embedded import twin as twin_mod
from dra_harness.providers.embedded import twin_policies
from dra_harness.providers.embedded.cluster import DRIVER_NAME, ClusterSpec, LocalCluster
from dra_harness.components.real_node_host import unavailable_reason
from dra_harness.report.results import read_results

from tests.integration.twins import faults

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
        # The records a killed run's watchdog left for `cluster down --all` name this twin, which is gone now.
        for path in run_records.directory().glob("*.json") if run_records.directory().is_dir() else []:
            if str(workdir) in path.read_text():
                path.unlink(missing_ok=True)


def run_main_job(made: twin_mod.Twin, report_dir: Path, *extra: str, env: dict[str, str] | None = None,
                 on_start: Callable[[subprocess.Popen], None] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """``dra-harness run --cluster existing`` through the twin's ServiceAccount, as a user's CI would."""
    started = time.monotonic()
    shell = [f"--shell-image={WORKLOAD_IMAGE}"] if made.shape.shell_image else []
    if made.shape.simulated_nodes:
        shell += ["--allow-contention", f"--simulated-nodes={made.shape.simulated_nodes}"]
    args = [sys.executable, "-m", "dra_harness.cli", "run", "--cluster", "existing", "--kubeconfig", str(made.kubeconfig),
            "--expected-hardware", str(made.expected_hardware), "--allow-disruptive", "--report-dir", str(report_dir),
            # The twins judge false FAILs and harm, not how much a shape lets a run establish: 0 unless a test says.
            "--min-established=0", "--ignore=suites/test_contention.py", *shell, *extra]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    if on_start is not None:
        on_start(proc)
    try:
        out, err = proc.communicate(timeout=1500)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return subprocess.CompletedProcess(args, proc.returncode, out, err), time.monotonic() - started


#: A not-established reason that says the run lost its lease: under skewed clocks, another run took it over.
LEASE_LOST = "is no longer its own"


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
    fault: str = ""  # what the shape's fault did
    fault_missed: str = ""  # why it was not injected, where the run gave it no chance that it should have
    after_fault: str = ""  # what was seen once the fault was over (a killed run's watchdog)
    overlapped: list[str] = field(default_factory=list)  # leases lost under skewed clocks
    exits: tuple[int, ...] = (0,)  # the exit codes the run may end with (3: it established too little, and said so)
    output: str = ""  # the runs' stdout and stderr, the last of them

    @property
    def limit_s(self) -> float:
        return RUN_LIMIT_S + {"api-away-mid-drain": faults.API_AWAY_S, "throttled-sweep": faults.STORM_S}.get(
            self.shape.fault, 0.0)

    @property
    def ok(self) -> bool:
        return not (self.failed or self.changed or self.left or self.fault_missed or self.overlapped) \
            and self.seconds <= self.limit_s and self.exit_code in self.exits

    def row(self) -> str:
        return (f"| {self.shape.seed} | {self.outcomes['passed']} | {self.outcomes['not established']} | "
                f"{self.outcomes['skipped']} | {self.outcomes['failed'] + self.outcomes['error']} | {self.seconds / 60:.1f} |"
                + (f" {self.shape.fault}: {self.fault or 'not reached'}{'; ' + self.after_fault if self.after_fault else ''} |"
                   if self.shape.fault else ""))

    def explain(self) -> str:
        lines = [self.shape.describe(), f"{self.seconds:.0f}s, exit {self.exit_code}, {dict(self.outcomes)}"]
        lines += [f"fault: {self.fault}"] if self.fault else []
        lines += [f"fault not injected: {self.fault_missed}"] if self.fault_missed else []
        lines += [f"after the fault: {self.after_fault}"] if self.after_fault else []
        lines += [f"FAIL {t}: {m[:300]}" for t, m in self.failed.items()]
        lines += [f"lease lost under skewed clocks: {m[:300]}" for m in self.overlapped]
        lines += [f"changed: {c}" for c in self.changed] + [f"left: {x}" for x in self.left]
        return "\n".join(lines)


def judge(cluster: LocalCluster, made: twin_mod.Twin, report_dir: Path, old: str = "", extra: tuple[str, ...] = (),
          exits: tuple[int, ...] = (0,)) -> Judgement:
    """Run the main job (``shape.runs`` of them at once, each with its own report, ``extra`` arguments) under the
    shape's fault, and judge them together. ``old``: a rule of the harness put back as before #34 (:mod:`.hooks`;
    negative controls)."""
    kube = cluster.kube()
    before = twin_mod.others(kube)
    dirs = [report_dir] if made.shape.runs == 1 else [report_dir / f"run-{i}" for i in range(made.shape.runs)]
    with faults.Injector(cluster, made, old) as injector:
        with ThreadPoolExecutor(len(dirs)) as pool:
            runs = list(pool.map(lambda i: run_main_job(made, dirs[i], *injector.args(i), *extra, env=injector.env(i),
                                                        on_start=lambda p: injector.started(i, p)), range(len(dirs))))
        injector.runs_over()
    j = Judgement(made.shape, max(took for _, took in runs), fault=injector.injected, exits=exits)
    killed = made.shape.fault == "kill-mid-drain" and bool(injector.injected)
    drains: dict[str, str] = {}
    for i, (d, (out, _)) in enumerate(zip(dirs, runs, strict=True)):
        try:
            rows = read_results(d)
        except Exception:  # noqa: BLE001 - a killed run writes no junit.xml
            rows = []
        (d.parent / f"{d.name}.out").write_text(out.stdout + out.stderr)  # beside its report, for a post-mortem
        j.output = out.stdout + out.stderr
        prefix = f"run {i}: " if len(dirs) > 1 else ""
        drains.update({prefix + r["nodeid"]: r["outcome"] for r in rows if "node_drain" in r["nodeid"]})
        j.outcomes.update(r["outcome"] for r in rows)
        j.failed.update({prefix + r["nodeid"]: r["message"] for r in rows if r["outcome"] in ("failed", "error")})
        j.not_established.update({prefix + r["nodeid"]: r["message"] for r in rows if r["outcome"] == "not established"})
        if killed:
            continue  # its pytest was killed: no verdict, no exit code to judge; what it left is judged below
        j.exit_code = j.exit_code or out.returncode
        if not rows or out.returncode not in exits:
            j.failed.setdefault(f"{prefix}run", (out.stdout + out.stderr)[-1500:])
    if made.shape.fault == "clock-skew":
        j.overlapped = [f"{t}: {m}" for t, m in j.not_established.items() if LEASE_LOST in m]
        ahead = sorted(injector.evidence.get("ahead", {}).values())
        if injector.injected and ahead[-1] - ahead[0] < faults.SKEW_S - 5:
            j.fault_missed = f"the runs' Leases were stamped {ahead[-1] - ahead[0]:.0f} s apart, not {faults.SKEW_S}"
    if made.shape.fault and not injector.injected:
        j.fault_missed = _missed(made.shape.fault, injector.not_reached, drains)
    elif made.shape.fault == "throttled-sweep" and injector.evidence["rejected"] < 2:
        j.fault_missed = "APF rejected no request of the sweep (only the probe's): the storm missed it"
    j.after_fault = injector.settle(lambda: twin_mod.leftovers(kube))
    j.changed = twin_mod.changed(before, twin_mod.others(kube))
    j.left = twin_mod.leftovers(kube)
    return j


def _missed(fault: str, why: str, drains: dict[str, str]) -> str:
    """Why a fault was not injected, where that is the test's fault; "" where the shape left the run no drain to
    make (every drain check not established or skipped: the row says "not reached")."""
    if fault.endswith("-mid-drain") and drains and all(o in ("not established", "skipped") for o in drains.values()):
        return ""
    return why
