"""A built wheel, installed into a fresh virtual environment, runs a suite from any directory.

Why: the plugin used to come from the checkout's conftest.py and its profiles, manifests
and stages from paths relative to the checkout, so an installed package had none of
them. Here nothing of the checkout is on the path: the wheel is built, installed with its
dependencies into a new venv, and pytest runs one of the installed suites from an empty
directory against an embedded cluster the installed plugin brings up.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.cluster


def _run(argv: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert out.returncode == 0, f"{' '.join(argv)} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the wheel built from this checkout (and its dependencies, from PyPI or pip's cache)."""
    tmp = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp / "dist"), str(ROOT)], tmp, 600)
    (wheel,) = (tmp / "dist").glob("dra_harness-*.whl")
    _run([sys.executable, "-m", "venv", str(tmp / "venv")], tmp, 120)
    _run([str(tmp / "venv" / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", str(wheel)], tmp, 900)
    return tmp / "venv"


def test_the_wheel_ships_its_data_and_suites(installed):
    where = _run([str(installed / "bin" / "python"), "-c", "import dra_harness, pathlib; print(pathlib.Path(dra_harness.__file__).parent)"],
                 installed, 60).strip()
    package = Path(where)
    assert package.is_relative_to(installed), f"dra_harness imported from {package}, not from the fresh venv"
    for shipped in ("data/profiles/example.yaml", "data/profiles/nvidia.yaml", "data/kind/manifests/dra-example-driver.yaml",
                    "data/kwok-stages.yaml", "data/gates.json", "data/rbac/dra-harness.yaml",
                    "data/components/kubernetes-v1.37.2/go.mod", "report/templates/signoff.html.j2",
                    "data/scenarios/inference-vs-training.yaml", "suites/contention-small.yaml", "suites/test_inventory.py"):
        assert (package / shipped).is_file(), f"{shipped} is missing from the wheel"


def test_an_installed_suite_runs_from_an_empty_directory_against_the_embedded_cluster(installed, tmp_path):
    package = Path(_run([str(installed / "bin" / "python"), "-c",
                         "import dra_harness, pathlib; print(pathlib.Path(dra_harness.__file__).parent)"], tmp_path, 60).strip())
    work = tmp_path / "anywhere"
    work.mkdir()
    env = {**os.environ, "DRA_HARNESS_STATE": str(tmp_path / "state")}
    env.pop("PYTHONPATH", None)
    out = _run([str(installed / "bin" / "python"), "-m", "pytest", str(package / "suites" / "test_inventory.py"),
                "--cluster=local", "--nodes=1", "--gpus-per-node=2", "-p", "no:cacheprovider", "-p", "no:locust",
                "-q", "-rs"], work, 600, env)
    assert " passed" in out and "failed" not in out and "error" not in out.lower(), out
    # The installed plugin (its entry point) ran the session: no conftest.py exists anywhere up from here.
    assert not any((p / "conftest.py").exists() for p in (work, *work.parents))


def test_the_installed_command_starts_a_cluster_that_an_installed_suite_targets_as_existing(installed, tmp_path):
    """The acceptance run of the issue: ``pytest --cluster=existing`` from any directory, on a cluster
    the installed ``dra-harness`` command started."""
    env = {**os.environ, "DRA_HARNESS_STATE": str(tmp_path / "state")}
    env.pop("PYTHONPATH", None)
    bin_dir = installed / "bin"
    kubeconfig = _run([str(bin_dir / "dra-harness"), "cluster", "up", "--name", "wheel", "--nodes", "1", "--gpus-per-node", "2",
                       "--real-nodes", "0"], tmp_path, 600, env).strip().splitlines()[-1]
    try:
        package = Path(_run([str(bin_dir / "python"), "-c", "import dra_harness, pathlib; print(pathlib.Path(dra_harness.__file__).parent)"],
                            tmp_path, 60).strip())
        out = _run([str(bin_dir / "python"), "-m", "pytest", str(package / "suites" / "test_inventory.py"), "--cluster=existing",
                    f"--kubeconfig={kubeconfig}", "-p", "no:cacheprovider", "-p", "no:locust", "-q"], tmp_path, 600, env)
        assert " passed" in out and "failed" not in out, out
    finally:
        _run([str(bin_dir / "dra-harness"), "cluster", "down", "--name", "wheel"], tmp_path, 300, env)
