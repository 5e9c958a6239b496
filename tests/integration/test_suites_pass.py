"""Every suite passes on a fresh embedded cluster (4 nodes x 8 devices): contention serially, the rest with -n 2.

Run the way a user runs them: a separate pytest with the default --cluster=local, which
brings up and removes its own cluster. Wall times are printed for the closing notes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from dra_harness.providers.embedded import runtime_dirs
from dra_harness.providers.embedded.cluster import clusters_root


@pytest.mark.parametrize("workers", [None, "2"], ids=["contention-serial", "xdist-2"])
def test_all_suites_pass_on_the_embedded_cluster(binaries, tmp_path, workers):
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--report-dir={tmp_path}"]
    # The contention suite is exclusive (it runs alone either way) and takes minutes: it runs once, serially;
    # every other suite runs with -n 2. The serial path of the others is the staging twin's and the main job's.
    args += ["-n", workers, "suites", "--ignore=suites/test_contention.py"] if workers else ["suites/test_contention.py"]
    before = _leftovers()
    started = time.monotonic()
    out = subprocess.run(args, capture_output=True, text=True, timeout=900)
    took = time.monotonic() - started
    print(f"suites ({'serial' if not workers else '-n ' + workers}): {took:.1f}s wall")
    assert out.returncode == 0, out.stdout[-4000:]
    lines = [json.loads(line) for line in (tmp_path / "evidence.jsonl").read_text().splitlines()]
    assert {line["outcome"] for line in lines} <= {"passed", "skipped"}
    assert sum(line["outcome"] == "passed" for line in lines) >= (25 if workers else 5)
    # Only new entries count: an earlier test's cluster may still be finishing its own teardown.
    assert not _leftovers() - before, f"left behind: {sorted(_leftovers() - before)}"


def _leftovers() -> set[str]:
    """Temp entries and cluster state the harness creates: locks, socket dirs, clusters."""
    found = {str(p) for p in Path(tempfile.gettempdir()).glob("dra-harness-*")}
    found |= {str(p) for p in runtime_dirs.SHORT_TMP.glob(runtime_dirs.PREFIX + "*")}
    root = clusters_root()
    return found | ({str(p) for p in root.iterdir()} if root.is_dir() else set())
