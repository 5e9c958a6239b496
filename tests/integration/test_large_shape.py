"""A large cluster drawn from today's seed (50-64 nodes, at least 400 devices): the preflight a user runs first and the
fingerprint every run takes stay within their budgets and count every device.

Why: a platform team's staging cluster has tens of GPU nodes; a preflight that lists per node, or a fingerprint that
reads each slice on its own, is fine on 4 nodes and a minute on 60. The preflight's budget is the issue's 30 s; the
fingerprint's is a third of it (it is read before any test and again by nothing).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import uuid

import pytest

from dra_harness.providers.embedded.cluster import DRIVER_NAME, LocalCluster
from dra_harness.providers.localstate import ClusterSpec
from dra_harness.report import fingerprint

from .test_twin_shapes import SEED

pytestmark = pytest.mark.cluster
PREFLIGHT_BUDGET_S = 30.0
FINGERPRINT_BUDGET_S = 10.0


def test_on_a_large_cluster_the_preflight_and_the_fingerprint_count_every_device_within_their_budgets(binaries, tmp_path):
    rng = random.Random(SEED)
    nodes, gpus = rng.randint(50, 64), rng.choice((8, 8, 16))
    print(f"\nseed {SEED}: {nodes} nodes x {gpus} devices")
    name = f"it-large-{uuid.uuid4().hex[:6]}"
    cluster = LocalCluster(name)
    cluster.up(ClusterSpec(name=name, nodes=nodes, gpus_per_node=gpus, owner_pid=os.getpid()), timeout=300)
    try:
        facts = tmp_path / "preflight.json"
        started = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "dra_harness.cli", "preflight", f"--kubeconfig={cluster.kubeconfig}",
                              f"--out={facts}"], capture_output=True, text=True, timeout=300)
        preflight_s = time.monotonic() - started
        assert out.returncode == 0, out.stderr[-3000:]
        read = json.loads(facts.read_text())
        started = time.monotonic()
        fp = fingerprint.collect(cluster.kube(), {}, ["test"], "existing")
        fingerprint_s = time.monotonic() - started
    finally:
        cluster.down()
    print(f"preflight {preflight_s:.1f} s (its own count {read['seconds']:.1f} s), fingerprint {fingerprint_s:.1f} s")
    assert len(read["nodes"]) == nodes and sum(n["free"] for n in read["nodes"].values()) == nodes * gpus, read["nodes"]
    assert fp["inventory"][DRIVER_NAME]["devices"] == nodes * gpus, fp["inventory"]
    assert preflight_s <= PREFLIGHT_BUDGET_S, f"the preflight took {preflight_s:.1f} s on {nodes * gpus} devices"
    assert fingerprint_s <= FINGERPRINT_BUDGET_S, f"the fingerprint took {fingerprint_s:.1f} s on {nodes * gpus} devices"
