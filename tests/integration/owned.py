"""What a test's own cluster or run started, told from what other tests start on the same machine.

The project's tests run on two pytest-xdist workers: a leftover check that lists every KWOK
process, every lock directory or every cluster on the host sees the other worker's too, and
fails (or waits) for something that is not its test's. These helpers name only what belongs
to one cluster (its API server, its real node's cgroup) or one run (its run id).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from dra_harness.providers.embedded.cluster import LocalCluster
from dra_harness.providers.embedded.realnode import node_key
from dra_harness.providers.simulated_nodes import ANNOTATION


def _server(kubeconfig: str | Path) -> str | None:
    try:
        return yaml.safe_load(Path(kubeconfig).read_text())["clusters"][0]["cluster"]["server"]
    except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError):
        return None  # gone with its run, or not a kubeconfig


def _args(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _cgroups(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return ""


def kwok_processes(cluster: LocalCluster) -> dict[int, str]:
    """Run KWOKs (managing nodes by the harness's annotation) serving ``cluster``: the local form by the
    server of its ``--kubeconfig``, the pod form by the cgroup of the cluster's real node it runs in."""
    server = _server(cluster.kubeconfig)
    own_cgroup = f"/dra-harness-{node_key(cluster.state_dir)}-"
    out = subprocess.run(["pgrep", "-f", f"annotation-selector={ANNOTATION}"], capture_output=True, text=True).stdout
    found = {}
    for pid in (int(p) for p in out.split()):
        args = _args(pid)
        kubeconfigs = [a.split("=", 1)[1] for a in args if a.startswith("--kubeconfig=")]
        if (kubeconfigs and server and _server(kubeconfigs[0]) == server) or (not kubeconfigs and own_cgroup in _cgroups(pid)):
            found[pid] = " ".join(args)
    return found


def run_lock_dirs(run_id: str) -> set[Path]:
    """The private directories a test session of ``run_id`` makes under /tmp (xdist's lock, KWOK's log)."""
    return set(Path("/tmp").glob(f"dra-harness-{run_id}-*"))


def kwok_dirs(run_id: str) -> set[Path]:
    """KWOK's log directories of ``run_id``: in its private directory, or (with none) top-level in /tmp, where only
    those whose stages name the run are its own (other workers' tests start KWOKs of their own there)."""
    def ours(d: Path) -> bool:
        try:
            return run_id in (d / "stages.yaml").read_text()
        except OSError:  # another's, going, or not yet written
            return False
    return {d for d in Path("/tmp").glob("dra-harness-kwok-*") if ours(d)} \
        | set(Path("/tmp").glob(f"dra-harness-{run_id}-*/dra-harness-kwok-*"))
