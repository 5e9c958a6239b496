"""No two modules import each other, directly or through others, when the package runs.

import-linter's contracts say which way layers point; a circle inside one layer (two modules of one
provider each needing the other) passes them. grimp, import-linter's own graph, finds every such
chain, counting imports only a type checker reads too: a module naming another's type for its
annotations, while that one imports it back, is a circle all the same (the last two went with
protocols: :mod:`dra_harness.providers.embedded.core`, :mod:`dra_harness.providers.abilities`).
The negative control plants a circle in a copy of the package.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_SCRIPT = """
import grimp, json, sys
g = grimp.build_graph("dra_harness", exclude_type_checking_imports=sys.argv[1] == "run", cache_dir=None)
print(json.dumps(sorted({tuple(sorted((a, b))) for a in g.modules for b in g.find_modules_directly_imported_by(a)
                         if g.chain_exists(importer=b, imported=a)})))
"""


def _circles(src: Path, which: str) -> set[tuple[str, str]]:
    out = subprocess.run([sys.executable, "-c", _SCRIPT, which], env={"PYTHONPATH": str(src)}, capture_output=True,
                         text=True, timeout=120, check=True)
    return {tuple(pair) for pair in json.loads(out.stdout)}  # type: ignore[misc]


def test_no_module_imports_one_that_imports_it_back_at_run_time():
    assert _circles(ROOT / "src", "run") == set()


def test_no_circle_either_when_imports_for_the_type_checker_count():
    assert _circles(ROOT / "src", "all") == set()


def test_a_planted_circle_is_found(tmp_path):
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "dra_harness", copy / "dra_harness", ignore=shutil.ignore_patterns("__pycache__"))
    chart = copy / "dra_harness" / "components" / "nvidia_chart.py"
    chart.write_text(chart.read_text() + "\nfrom dra_harness.providers.embedded import cluster  # planted\n")
    assert ("dra_harness.components.nvidia_chart", "dra_harness.providers.embedded.cluster") in _circles(copy, "run")
