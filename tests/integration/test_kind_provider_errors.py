"""The kind provider says in one line what is missing (Docker CLI, Docker engine, kind, helm) before creating anything.

PATH is rebuilt per test from stand-in scripts: a ``docker`` whose engine is down
answers like the real CLI does without a daemon (the state of this project's own
machine: a docker CLI, no engine), one whose engine is up answers ``docker info``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "dra_harness.cli"]
ENGINE_DOWN = (
    "#!/bin/sh\n"
    "echo 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?' >&2\n"
    "exit 1\n"
)
ENGINE_UP = '#!/bin/sh\n[ "$1" = info ] && echo 27.3.1 && exit 0\nexit 0\n'
KIND_EMPTY = '#!/bin/sh\n[ "$1 $2" = "get clusters" ] && echo "No kind clusters found." >&2\nexit 0\n'


def _bin(tmp_path: Path, **scripts: str) -> dict[str, str]:
    """An environment whose PATH holds only these stand-ins and the tools a shell script needs."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in scripts.items():
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    for tool in ("sh", "echo", "cat"):
        real = shutil.which(tool)
        if real and not (bindir / tool).exists():
            (bindir / tool).symlink_to(real)
    return {**os.environ, "PATH": str(bindir), "DRA_HARNESS_CACHE": str(tmp_path / "cache")}


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=env)


def _one_line_error(out: subprocess.CompletedProcess, expected: str) -> None:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    assert expected in lines[0]


def test_no_docker_cli(tmp_path):
    _one_line_error(_cli(_bin(tmp_path), "cluster", "up", "--provider", "kind"), "`docker` is not on PATH")


def test_a_docker_cli_without_an_engine(tmp_path):
    out = _cli(_bin(tmp_path, docker=ENGINE_DOWN), "cluster", "up", "--provider", "kind")
    _one_line_error(out, "needs a running Docker engine: `docker info` says: Cannot connect to the Docker daemon")


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI on this machine")
def test_this_machines_real_docker_cli_without_engine(tmp_path):
    """The machine's own docker CLI, when no engine answers it (skipped where one does)."""
    if subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0:
        pytest.skip("a Docker engine is running here")
    env = _bin(tmp_path)
    os.symlink(shutil.which("docker"), tmp_path / "bin" / "docker")
    _one_line_error(_cli(env, "cluster", "up", "--provider", "kind"), "needs a running Docker engine")


def test_no_kind(tmp_path):
    _one_line_error(_cli(_bin(tmp_path, docker=ENGINE_UP), "cluster", "up", "--provider", "kind"), "needs the kind CLI on PATH")


def test_no_helm_when_helm_is_asked_for(tmp_path):
    out = _cli(_bin(tmp_path, docker=ENGINE_UP, kind=KIND_EMPTY), "cluster", "up", "--provider", "kind", "--install", "helm")
    _one_line_error(out, "--install helm needs helm on PATH")


def test_down_says_the_same(tmp_path):
    _one_line_error(_cli(_bin(tmp_path, docker=ENGINE_DOWN), "cluster", "down", "--provider", "kind"), "needs a running Docker engine")


def test_the_suites_refuse_cluster_kind_in_one_line_without_an_engine(tmp_path):
    env = _bin(tmp_path, docker=ENGINE_DOWN)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "suites/test_inventory.py", "--cluster=kind", "-q", "-p", "no:cacheprovider"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 4, text  # pytest's usage error
    assert "Traceback" not in text
    assert "ERROR: the kind provider needs a running Docker engine: `docker info` says: Cannot connect" in text
