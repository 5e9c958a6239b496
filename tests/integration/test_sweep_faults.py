"""The sweep under the faults a shared cluster has: an API front end answering 503, a run killed outright.

Each fault through the real thing: a loopback front end (:mod:`tests.integration.frontend`) before a real embedded
API server, answering 503 for seconds as a load balancer does while the control plane behind it restarts; and
``dra-harness preflight`` killed with SIGKILL (alone, or with its watchdog: a lost machine).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from dra_harness.kube import rest
from dra_harness.kube.client import connect
from dra_harness.labels import RUN_LABEL, run_selector
from dra_harness.plugin import run_watchdog
from dra_harness.providers import liveness, run_records
from dra_harness.providers.lock import KIND_LABEL
from dra_harness.providers.sweep import sweep_run
from tests.integration.frontend import FrontEnd
from tests.integration.test_run_lifetime import _wait_for

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]


def test_a_sweep_during_a_503_from_the_front_end_deletes_the_runs_device_taint_rule(small_cluster, tmp_path):
    kube = small_cluster.kube()
    rules = rest.device_taint_rules(kube)
    assert rules is not None, "the embedded cluster serves DeviceTaintRules"
    kube.create(rules, {"metadata": {"name": "drh-evict", "labels": {RUN_LABEL: "killed-run"}},
                        "spec": {"deviceSelector": {"driver": "nothing.example.com"},
                                 "taint": {"key": "example.com/maintenance", "value": "x", "effect": "NoExecute"}}})
    with FrontEnd(kube) as front:
        through = connect(front.kubeconfig(tmp_path / "front.yaml"))
        front.fail_for(5)  # the watchdog's sweep starts while the control plane behind the front end restarts
        left = sweep_run(through, "killed-run", timeout=60)
        assert front.failed, "the front end answered 503"
    # Before: discovery's 503 was 'not served', the rule was never listed, and the sweep said nothing was left.
    assert not kube.list(rules, label_selector=run_selector("killed-run")), "the NoExecute rule survived the sweep"
    assert left == []


def _namespaces(kube: rest.Kube, run: str | None = None) -> list[str]:
    """The probe namespaces of preflights (of ``run``) that are not being deleted."""
    return [n["metadata"]["name"] for n in kube.list(rest.NAMESPACES, label_selector=run_selector(run) if run else RUN_LABEL)
            if n["metadata"]["name"].startswith("drh-pre-") and not n["metadata"].get("deletionTimestamp")]




def _preflight(kubeconfig: Path, tmp_path: Path, name: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dra_harness.cli", "preflight", "--kubeconfig", str(kubeconfig), *args], cwd=ROOT, stdout=(tmp_path / f"{name}.log").open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def _killed_at_its_probe(proc: subprocess.Popen, kube: rest.Kube) -> str:
    """SIGKILL ``proc`` once its probe namespace exists; that namespace's run id."""
    try:
        ns = _wait_for("the preflight's probe namespace", lambda: next(iter(_namespaces(kube)), None), 120)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return kube.get(rest.NAMESPACES, ns)["metadata"]["labels"][RUN_LABEL]


def _watchdogs_of(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"dra_harness.plugin.run_watchdog {pid} "], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_killing_preflight_outright_leaves_no_probe_namespace(small_cluster, tmp_path):
    kube = small_cluster.kube()
    run = _killed_at_its_probe(_preflight(small_cluster.kubeconfig, tmp_path, "preflight"), kube)
    # Before: preflight started no watchdog, and its drh-pre-* namespace stayed for good.
    _wait_for("the watchdog to delete the preflight's namespace", lambda: not _namespaces(kube, run), 60)
    _wait_for("the watchdog to delete the run's Lease", lambda: not liveness.run_leases(kube, "default"), 30)
    log = run_watchdog.log_path(run, None)
    assert "nothing left" in log.read_text(), log.read_text()[-2000:]  # its log says what it did, kept after a kill
    shutil.rmtree(log.parent)


def test_a_later_preflight_removes_what_a_run_killed_with_its_watchdog_left_and_says_so(small_cluster, tmp_path):
    """A lost machine: the preflight and its watchdog killed outright while the front end answers 503; nothing of
    theirs will sweep the run. The next harness command on the cluster does, once the run's Lease lapsed."""
    kube = small_cluster.kube()
    with FrontEnd(kube) as front:
        proc = _preflight(front.kubeconfig(tmp_path / "front.yaml"), tmp_path, "killed", "--lease-seconds", "10")
        watchdogs = _wait_for("the preflight's watchdog", lambda: _watchdogs_of(proc.pid), 60)
        ns = _wait_for("the preflight's probe namespace", lambda: next(iter(_namespaces(kube)), None), 120)
        front.fail_for(20)
        for pid in [proc.pid, *watchdogs]:
            os.kill(pid, signal.SIGKILL)
        proc.wait()
    run = kube.get(rest.NAMESPACES, ns)["metadata"]["labels"][RUN_LABEL]
    lease = kube.get(liveness.LEASES, liveness.lease_name(run), "default")
    _wait_for("the killed run's Lease to lapse (30 s unrenewed)",
              lambda: not liveness.alive(kube.get(liveness.LEASES, liveness.lease_name(run), "default"), kube.server_date()), 60)
    assert lease["spec"]["leaseDurationSeconds"] == 30
    later = subprocess.run([sys.executable, "-m", "dra_harness.cli", "preflight", "--kubeconfig", str(small_cluster.kubeconfig)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    said = [line for line in later.stderr.splitlines() if f"dead run {run}" in line]
    assert len(said) == 1 and ns in said[0], later.stderr[-3000:]
    assert not _namespaces(kube, run), "the dead run's namespace is still there"
    assert not liveness.run_leases(kube, "default"), "a run Lease is left"
    run_records.remove(run)  # the killed run's record, for `cluster down --all`: its cluster goes with this test
    shutil.rmtree(run_watchdog.log_path(run, None).parent, ignore_errors=True)
    for lock_dir in Path("/tmp").glob(f"dra-harness-{run}-*"):  # its watchdog, killed too, did not remove it
        shutil.rmtree(lock_dir, ignore_errors=True)


def _planted_dead_run(kube: rest.Kube, run: str) -> str:
    """What a run killed with its machine leaves: its namespace and its Lease, which nobody renews (1 s long)."""
    ns = f"drh-{run}"
    kube.create(rest.NAMESPACES, {"metadata": {"name": ns, "labels": {RUN_LABEL: run}}})
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    kube.create(liveness.LEASES, {"metadata": {"name": liveness.lease_name(run), "labels": {
        RUN_LABEL: run, KIND_LABEL: liveness.RUN_LEASE}}, "spec": {
        "holderIdentity": "lost-machine", "leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now}}, "default")
    _wait_for("the planted Lease to lapse", lambda: not liveness.alive(
        kube.get(liveness.LEASES, liveness.lease_name(run), "default"), kube.server_date()), 30)
    return ns


def _cluster_down_all(cache: Path) -> subprocess.CompletedProcess:
    """``cluster down --all`` with a cache of its own: no embedded cluster of this machine is in it, so the command
    takes down nothing but what the cache's run records lead it to."""
    env = {**os.environ, "DRA_HARNESS_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "dra_harness.cli", "cluster", "down", "--all"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_cluster_down_all_sweeps_the_dead_runs_on_the_cluster_a_run_record_names_and_drops_the_record(small_cluster, tmp_path):
    """A run on a cluster that outlives it (``--cluster existing``) died with its watchdog: its record in the cache
    names the cluster, and ``cluster down --all`` sweeps it there. Control: with no record, the command does not
    know the cluster, and the dead run's namespace stays."""
    kube = small_cluster.kube()
    run = f"dead-{os.urandom(3).hex()}"
    ns = _planted_dead_run(kube, run)
    control = _cluster_down_all(tmp_path / "empty-cache")
    assert control.returncode == 0, control.stderr
    assert ns in [n["metadata"]["name"] for n in kube.list(rest.NAMESPACES, label_selector=run_selector(run))]
    cache = tmp_path / "cache"
    with mock.patch.dict(os.environ, {"DRA_HARNESS_CACHE": str(cache)}):
        dead = subprocess.Popen(["true"])
        dead.wait()  # a pid of a process that is gone: the run's watchdog
        run_records.write(run_records.Record(run, str(small_cluster.kubeconfig), "", "default", dead.pid))
    out = _cluster_down_all(cache)
    assert out.returncode == 0, out.stderr
    said = [line for line in out.stderr.splitlines() if f"dead run {run}" in line]
    assert len(said) == 1 and f"Namespace/{ns}" in said[0], out.stderr[-3000:]
    _wait_for("the dead run's namespace to be gone",
              lambda: not kube.list(rest.NAMESPACES, label_selector=run_selector(run)), 60)
    assert not [lease for lease in liveness.run_leases(kube, "default") if liveness.run_of(lease) == run]
    assert not list((cache / "runs").glob("*.json")), "the swept run's record is kept"
