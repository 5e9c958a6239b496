"""A GPU pool scaled to zero: the driver is installed and its DeviceClass exists, but no node publishes a device
(an autoscaled pool at rest, as managed offerings leave it). A run must fail nothing, say it tested too little and
why (exit 3), and leave nothing; the preflight must say no device is published.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dra_harness.kube import rest
from dra_harness.labels import RUN_LABEL
from dra_harness.providers.embedded.cluster import DRIVER_NAME
from dra_harness.report.results import read_results
from dra_harness.retrying import NotYet, until

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]


def test_a_pool_scaled_to_zero_fails_nothing_says_it_tested_too_little_and_leaves_nothing(small_cluster, tmp_path):
    kube = small_cluster.kube()
    for node in small_cluster.state().spec.all_node_names():
        small_cluster.stop_driver(node)
    for s in kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={DRIVER_NAME}"):
        kube.delete(rest.RESOURCE_SLICES, s["metadata"]["name"])

    def none_left() -> None:
        if kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={DRIVER_NAME}"):
            raise NotYet("slices still published")

    until(time.monotonic() + 30, 0.5, logging.getLogger(__name__), "the pool's slices to be gone")(none_left)
    out = subprocess.run([sys.executable, "-m", "dra_harness.cli", "run", "--cluster", "existing",
                          "--kubeconfig", str(small_cluster.kubeconfig), "--driver", "example",
                          "--report-dir", str(tmp_path / "run"), "--ignore=suites/test_contention.py"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    said = out.stdout + out.stderr
    rows = read_results(tmp_path / "run")
    failed = [r["nodeid"] for r in rows if r["outcome"] in ("failed", "error")]
    assert out.returncode == 3 and not failed, (out.returncode, failed, said[-3000:])
    assert "tested too little: established" in said, said[-3000:]
    assert not kube.list(rest.NAMESPACES, label_selector=RUN_LABEL), "the run left a namespace"
