"""Every suite passes on a fresh embedded cluster (4 nodes x 8 devices): contention serially, the rest with -n 2.

Run the way a user runs them: a separate pytest with the default --cluster=local, which
brings up and removes its own cluster. Wall times are printed for the closing notes.

The -n 2 run has a real kubelet node beside the KWOK ones where this machine can run one, and its
container-level checks must have passed there, not been skipped. (They had a run of their own, 174 s
of a CI worker's time; folded here, the -n 2 run grew by 96 s alone, 117 s in a CI run, and runs the real
node's other checks too: driver configurations, device health.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from dra_harness.components.real_node_host import unavailable_reason
from dra_harness.host import runtime_dirs
from dra_harness.providers.embedded.cluster import clusters_root


REAL_NODES = unavailable_reason()  # None: this machine runs a real node
CONTAINER_CHECKS = (
    "test_containers_see_exactly_their_allocated_devices",
    "test_the_sharing_settings_of_an_opaque_gpu_config_reach_the_container",
    "test_a_kubelet_wipes_the_slices_of_a_driver_gone_30_s_and_running_containers_keep_running",
    "test_a_pod_whose_driver_is_gone_stays_terminating_until_the_driver_unprepares_it",
    "test_an_init_container_and_a_regular_container_share_one_gpu",
    "test_an_admin_access_claim_reaches_a_device_another_pod_holds_and_says_so_in_the_container",
    # Not a container's, but only a real kubelet has it.
    "test_each_kubelet_that_prepared_a_claim_counts_it_in_its_dra_metrics",
)


@pytest.mark.parametrize("workers", [None, "2"], ids=["contention-serial", "xdist-2"])
def test_all_suites_pass_on_the_embedded_cluster(binaries, tmp_path, workers):
    run_id = f"it-{uuid.uuid4().hex[:10]}"  # what the run makes carries it: another worker's runs are not this one's
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--report-dir={tmp_path}", f"--run-id={run_id}"]
    # The contention suite is exclusive (it runs alone either way) and takes minutes: it runs once, serially;
    # every other suite runs with -n 2. The serial path of the others is the staging twin's and the main job's.
    real = workers is not None and REAL_NODES is None
    args += ["-n", workers, "suites", "--ignore=suites/test_contention.py"] if workers else ["suites/test_contention.py"]
    args += ["--real-nodes", "1"] if real else []
    before = _leftovers(run_id)
    started = time.monotonic()
    out = subprocess.run(args, capture_output=True, text=True, timeout=900)
    took = time.monotonic() - started
    print(f"suites ({'serial' if not workers else '-n ' + workers}{', a real node' if real else ''}): {took:.1f}s wall")
    assert out.returncode == 0, out.stdout[-4000:]
    lines = [json.loads(line) for line in (tmp_path / "evidence.jsonl").read_text().splitlines()]
    assert {line["outcome"] for line in lines} <= {"passed", "skipped"}
    assert sum(line["outcome"] == "passed" for line in lines) >= (25 if workers else 5)
    if real:
        ran = {line["test"].split("::")[-1].split("[")[0] for line in lines if line["outcome"] == "passed"}
        assert set(CONTAINER_CHECKS) <= ran, f"container checks not run on the real node: {sorted(set(CONTAINER_CHECKS) - ran)}"
    assert before == set(), before
    assert not _leftovers(run_id), f"left behind: {sorted(_leftovers(run_id))}"


def _leftovers(run_id: str) -> set[str]:
    """Temp entries and cluster state the run creates: its lock directory, its cluster, the cluster's socket dirs
    (each names the state directory it belongs to). Only the run's: other tests' runs may share the machine."""
    found = {str(p) for p in Path(tempfile.gettempdir()).glob(f"dra-harness-{run_id}-*")}
    for d in runtime_dirs.SHORT_TMP.glob(runtime_dirs.PREFIX + "*"):
        try:
            if run_id in (d / runtime_dirs.MARKER).read_text():
                found.add(str(d))
        except OSError:  # another cluster's, going
            pass
    return found | {str(p) for p in clusters_root().glob(f"*{run_id}*")}
