"""Nothing of a cluster survives it: not after `down`, a killed owner, or lost pid files."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dra_harness.host import runtime_dirs
from dra_harness.providers.embedded.cluster import ClusterSpec, LocalCluster, all_clusters
from dra_harness.host.processes import listening_sockets


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(cluster: LocalCluster, pids: list[int], runtime_dirs: list[Path], timeout: float) -> None:
    assert runtime_dirs, "no runtime dir recorded or marked"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (not cluster.state_dir.exists() and not any(d.exists() for d in runtime_dirs)
                and not any(_alive(p) for p in pids)):
            return
        time.sleep(0.2)
    raise AssertionError(
        f"after {timeout}s: state dir exists={cluster.state_dir.exists()}, "
        f"runtime dirs left={[d for d in runtime_dirs if d.exists()]}, alive={[p for p in pids if _alive(p)]}"
    )


def test_down_leaves_no_process_listening_port_or_directory(small_cluster):
    pids = small_cluster.pids()
    ports = {p for _, p, _ in listening_sockets(pids)}
    runtime_dir = small_cluster.runtime_dir
    assert len(pids) >= 7 and ports  # etcd, apiserver, kcm, scheduler, kwok, 2 drivers (+ watchdog)
    started = time.monotonic()
    small_cluster.down()
    took = time.monotonic() - started
    assert not [p for p in pids if _alive(p)]
    listening_now = {p for _, p, _ in listening_sockets([int(x) for x in os.listdir("/proc") if x.isdigit()])}
    assert not ports & listening_now, f"ports still listening: {sorted(ports & listening_now)}"
    assert not small_cluster.state_dir.exists() and not runtime_dir.exists()
    assert took < 30, f"down took {took:.1f}s"


def test_the_watchdog_removes_the_cluster_when_its_owner_is_killed(binaries):
    owner = subprocess.Popen(["sleep", "600"])
    cluster = LocalCluster("it-watchdog")
    try:
        cluster.up(ClusterSpec(name=cluster.name, nodes=1, gpus_per_node=1, owner_pid=owner.pid))
        pids, runtime_dirs = cluster.pids(), cluster.runtime_dirs()
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        _wait_gone(cluster, pids, runtime_dirs, timeout=30)
    finally:
        owner.kill()
        cluster.down()


def test_down_all_finds_processes_whose_pid_files_were_lost(binaries, tmp_path, monkeypatch):
    # A private state root: `down --all` must not take the test session's own cluster with it.
    monkeypatch.setenv("DRA_HARNESS_STATE", str(tmp_path / "clusters"))
    cli = [sys.executable, "-m", "dra_harness.cli"]
    name = "it-stale"
    up = subprocess.run([*cli, "cluster", "up", "--name", name, "--nodes", "1", "--gpus-per-node", "1"], capture_output=True, text=True, timeout=300)
    cluster = LocalCluster(name)
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.strip() == str(cluster.kubeconfig)
        pids, runtime_dirs = cluster.pids(), cluster.runtime_dirs()
        shutil.rmtree(cluster.state_dir / "pids")  # as if the harness died before writing them
        down = subprocess.run([*cli, "cluster", "down", "--all"], capture_output=True, text=True, timeout=120)
        assert down.returncode == 0, down.stderr
        _wait_gone(cluster, pids, runtime_dirs, timeout=15)
    finally:
        cluster.down()


def test_ctrl_c_during_up_leaves_nothing(binaries, tmp_path, monkeypatch):
    monkeypatch.setenv("DRA_HARNESS_STATE", str(tmp_path / "clusters"))
    cluster = LocalCluster("it-interrupted")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dra_harness.cli", "cluster", "up", "--name", cluster.name, "--nodes", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        # Interrupt once the control plane is starting, before `up` can finish.
        deadline = time.monotonic() + 60
        while not (cluster.state_dir / "logs" / "kube-apiserver.log").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pids, runtime_dirs = cluster.pids(), cluster.runtime_dirs()
        assert pids, "nothing was started"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "Traceback" not in err
        _wait_gone(cluster, pids, runtime_dirs, timeout=15)
    finally:
        proc.kill()
        cluster.down()


def test_down_all_removes_a_runtime_dir_whose_state_is_gone_and_never_a_look_alike(tmp_path, monkeypatch):
    """A run killed after its state was removed leaves only its private /tmp directory: `down --all`
    finds it by its marker. Negative control: a world-writable directory with the same marker
    (what another user could plant) is neither trusted nor touched."""
    root = tmp_path / "clusters"
    monkeypatch.setenv("DRA_HARNESS_STATE", str(root))
    orphan = runtime_dirs.create(root / "it-orphan")
    (orphan / "gpu-node-0" / "plugins").mkdir(parents=True)
    planted = Path(tempfile.mkdtemp(prefix=runtime_dirs.PREFIX, dir=runtime_dirs.SHORT_TMP))
    try:
        os.chmod(planted, 0o777)
        (planted / runtime_dirs.MARKER).write_text(str(root / "it-orphan"))
        assert [c.name for c in all_clusters()] == ["it-orphan"]
        down = subprocess.run([sys.executable, "-m", "dra_harness.cli", "cluster", "down", "--all"],
                              capture_output=True, text=True, timeout=60)
        assert down.returncode == 0, down.stderr
        assert not orphan.exists()
        assert (planted / runtime_dirs.MARKER).exists()
    finally:
        shutil.rmtree(planted, ignore_errors=True)
        shutil.rmtree(orphan, ignore_errors=True)
