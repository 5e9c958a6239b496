"""The container-level checks of the suites pass on a real node (and really ran, not skipped).

Run the way a user runs them: a separate pytest with ``--real-nodes 1``, which brings up
and removes its own cluster with one real kubelet node beside the KWOK ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from dra_harness.components.real_node_host import unavailable_reason

REASON = unavailable_reason()
CONTAINER_CHECKS = (
    "test_containers_see_exactly_their_allocated_devices",
    "test_the_sharing_settings_of_an_opaque_gpu_config_reach_the_container",
    "test_a_kubelet_wipes_the_slices_of_a_driver_gone_30_s_and_running_containers_keep_running",
    "test_a_pod_whose_driver_is_gone_stays_terminating_until_the_driver_unprepares_it",
    "test_an_init_container_and_a_regular_container_share_one_gpu",
    "test_an_admin_access_claim_reaches_a_device_another_pod_holds_and_says_so_in_the_container",
    # Not a container's, but only a real kubelet has it; run after the drain suite, whose claims it must not count.
    "test_each_kubelet_that_prepared_a_claim_counts_it_in_its_dra_metrics",
)


@pytest.mark.skipif(REASON is not None, reason=f"no real nodes here: {REASON}")
def test_container_checks_of_the_suites_pass_on_a_real_node(tmp_path):
    args = [sys.executable, "-m", "pytest", "suites/test_sharing.py", "suites/test_driver_restart.py",
            "suites/test_node_drain.py", "suites/test_parity.py", "suites/test_metrics.py", "-q", "-p", "no:cacheprovider", "--real-nodes", "1",
            f"--report-dir={tmp_path}"]
    started = time.monotonic()
    out = subprocess.run(args, capture_output=True, text=True, timeout=900)
    print(f"sharing, driver-restart, drain, parity and metrics suites with a real node: {time.monotonic() - started:.1f}s wall")
    assert out.returncode == 0, out.stdout[-4000:]
    lines = [json.loads(line) for line in (tmp_path / "evidence.jsonl").read_text().splitlines()]
    ran = {line["test"].split("::")[-1].split("[")[0] for line in lines if line["outcome"] == "passed"}
    assert set(CONTAINER_CHECKS) <= ran, f"container checks not run: {sorted(set(CONTAINER_CHECKS) - ran)}"
