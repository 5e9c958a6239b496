"""ruff and mypy, as configured in pyproject.toml, are clean; CI runs them as part of the selftest.

Both come from the ``dev`` extra, which ``./harness`` installs. A missing tool fails the test
(with the command that installs it) rather than skipping it, so CI cannot pass without them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(tool: str, *args: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(tool) is None:
        pytest.fail(f"{tool} is not installed in {sys.prefix}; install the dev extra: pip install -e '{ROOT}[dev]'")
    # MYPYPATH: the checkout's own package, whichever copy (or none) is installed in this environment.
    env = {**os.environ, "MYPYPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_ruff_finds_nothing_in_the_checkout():
    done = _run("ruff", "check", "--no-fix", "--output-format", "concise", ".")
    assert done.returncode == 0, f"ruff check:\n{done.stdout}{done.stderr}"


def test_mypy_finds_nothing_in_the_package():
    done = _run("mypy")  # files, settings and exclusions: [tool.mypy] in pyproject.toml
    assert done.returncode == 0, f"mypy:\n{done.stdout}{done.stderr}"


def test_negative_control_mypy_rejects_a_misspelled_key_in_a_kubernetes_object(tmp_path):
    """The object shapes in kube/types.py are what makes mypy see a lookup; a typo must be an error."""
    (tmp_path / "reader.py").write_text(
        "from dra_harness.kube.types import Obj, Pod, ResourceClaim\n"
        "def node(pod: Pod | Obj) -> str | None:\n"
        "    return pod['spec'].get('nodeName')\n"
        "def driver(claim: ResourceClaim | Obj) -> str:\n"
        "    return claim['status']['allocation']['devices']['results'][0]['drivr']\n"
    )
    done = _run("mypy", "--config-file", str(ROOT / "pyproject.toml"), "--no-incremental", "reader.py", cwd=tmp_path)
    assert done.returncode == 1, f"mypy accepted a misspelled key:\n{done.stdout}{done.stderr}"
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    # Strict mode may add a second complaint on the same line (Any returned); none may land elsewhere.
    assert errors and all(e.startswith("reader.py:5:") for e in errors), done.stdout
    assert any('has no key "drivr"' in e for e in errors), done.stdout
