"""The layers of the package hold (each importing only those below it), and the two local providers stay peers.

The contract lives in pyproject.toml ([tool.importlinter]); import-linter checks it. The
negative control plants one upward import in a copy of the package and proves the same
contract names it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"]


def _lint(src: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([*LINT, str(ROOT / "pyproject.toml"), "--no-cache"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_package_keeps_its_layers(tmp_path):
    out = _lint(ROOT / "src", tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 kept, 0 broken" in out.stdout


def test_the_forbidden_contract_names_every_module_outside_the_embedded_provider():
    """A module added beside the others is covered by the contract, or this names it."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    listed = set(next(c for c in contracts if c["type"] == "forbidden")["source_modules"])
    package = ROOT / "src" / "dra_harness"

    def modules(folder: Path, prefix: str) -> set[str]:
        return {f"{prefix}.{p.stem}" for p in folder.iterdir()
                if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}

    outside = (modules(package, "dra_harness") - {"dra_harness.providers"}) | (
        modules(package / "providers", "dra_harness.providers") - {"dra_harness.providers.embedded"})
    assert sorted(outside - listed) == [] and sorted(listed - outside) == []


def _planted(tmp_path: Path, module: str, line: str) -> str:
    """import-linter's report on a copy of the package with ``line`` appended to ``module`` (a path under dra_harness)."""
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "dra_harness", copy / "dra_harness", ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "dra_harness" / module
    target.write_text(target.read_text() + f"\n{line}  # planted\n")
    out = _lint(copy, tmp_path)
    assert out.returncode != 0, out.stdout
    return " ".join(out.stdout.split())


def test_an_upward_import_breaks_the_layer_contract(tmp_path):
    out = _planted(tmp_path, "kube/rest.py", "from dra_harness.plugin import inputs")  # kube must not know the plugin
    assert "dra_harness.kube is not allowed to import dra_harness.plugin" in out, out


def test_kind_importing_the_embedded_cluster_breaks_the_peers_contract(tmp_path):
    """Negative control of the independence contract: one provider reaching into the other is named."""
    out = _planted(tmp_path, "providers/kind/config.py", "from dra_harness.providers.embedded import commands")
    assert "dra_harness.providers.kind is not allowed to import dra_harness.providers.embedded" in out, out


def test_the_report_importing_the_embedded_cluster_breaks_the_forbidden_contract(tmp_path):
    """Negative control of the forbidden contract: a check or report module reaching the embedded cluster is named."""
    out = _planted(tmp_path, "report/readable.py", "from dra_harness.providers.embedded import cluster")
    assert "dra_harness.report is not allowed to import dra_harness.providers.embedded" in out, out


def test_the_provider_registry_importing_the_embedded_cluster_by_name_breaks_the_forbidden_contract(tmp_path):
    """The registry finds providers through entry points: an import of one by name, even in providers/, is named."""
    out = _planted(tmp_path, "providers/local.py", "from dra_harness.providers.embedded import provider")
    assert "dra_harness.providers.local is not allowed to import dra_harness.providers.embedded" in out, out
