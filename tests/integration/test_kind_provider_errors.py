"""The kind provider says in one line what it lacks and cannot provide itself (an engine, Go) before creating anything.

PATH is rebuilt per test from stand-in scripts: a ``docker`` whose engine is down
answers like the real CLI does without a daemon, one whose engine is up answers
``docker info``. As root the harness starts Debian's dockerd itself, so what is left
to refuse is a host with no way to get an engine and no Go (a user who may not start an
engine: ``tests/unit/test_docker_engine.py``).
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


def test_no_engine_and_nothing_to_start_one_with(tmp_path):
    """Root, but neither dockerd nor apt-get to install Debian's: one line, nothing created."""
    if os.geteuid() != 0:
        pytest.skip("the root case; the non-root one is below")
    out = _cli(_bin(tmp_path, docker=ENGINE_DOWN), "cluster", "up", "--provider", "kind")
    _one_line_error(out, "needs a Docker engine: no dockerd, and no apt-get to install Debian's docker.io")


def test_no_go_to_build_kind_and_helm_with(tmp_path):
    out = _cli(_bin(tmp_path, docker=ENGINE_UP), "cluster", "up", "--provider", "kind")
    _one_line_error(out, "the kind provider builds kind and Helm: Go is not installed")


def test_down_without_an_engine_has_nothing_to_delete(tmp_path):
    out = _cli(_bin(tmp_path, docker=ENGINE_DOWN), "cluster", "down", "--provider", "kind", "--name", "nothing-here")
    assert out.returncode == 0, out.stderr
    assert "no kind cluster 'nothing-here'" in out.stderr and "Traceback" not in out.stderr


def test_the_suites_refuse_cluster_kind_in_one_line_without_an_engine(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the root case")
    env = _bin(tmp_path, docker=ENGINE_DOWN)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "suites/test_inventory.py", "--cluster=kind", "-q", "-p", "no:cacheprovider"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 4, text  # pytest's usage error
    assert "Traceback" not in text
    assert "ERROR: the kind provider needs a Docker engine: no dockerd, and no apt-get" in text
