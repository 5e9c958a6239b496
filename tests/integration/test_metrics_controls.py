"""Negative control for the metrics suite: pods without claims move none of the DRA series it expects.

The same expectations (:func:`suites.test_metrics.control_plane`), the same number of pods and an
unschedulable one, but no claims: every DRA series must stay still (or not be served at all), so
a check that passes has seen DRA work, not just scheduling.
"""

from __future__ import annotations

import functools
import uuid

import pytest

from dra_harness.checks import metrics
from dra_harness.kube import builders, rest
from dra_harness.kube.pods import wait_running, wait_unschedulable
from dra_harness.suites.test_metrics import PODS, control_plane

pytestmark = pytest.mark.cluster


def test_pods_without_claims_move_none_of_the_dra_series(small_cluster):
    kube = small_cluster.kube()
    sources = {c: functools.partial(small_cluster.metrics, c) for c in ("kube-scheduler", "kube-controller-manager")}
    expected = control_plane()
    ns = f"metrics-{uuid.uuid4().hex[:6]}"
    kube.create(rest.NAMESPACES, {"metadata": {"name": ns}})
    try:
        before = {c: sources[c]() for c in expected}
        for i in range(PODS):
            kube.create(rest.PODS, builders.pod(f"p{i}", "controls"), ns)
        never = builders.pod("never", "controls")
        never["spec"]["nodeSelector"] = {"no-such-label": "anywhere"}
        kube.create(rest.PODS, never, ns)
        for i in range(PODS):
            wait_running(kube, ns, f"p{i}", timeout=60)
        wait_unschedulable(kube, ns, "never", timeout=60)
        found = metrics.settle(sources, expected, before, timeout=5)
    finally:
        kube.delete(rest.NAMESPACES, ns)
    moved = {c: sorted(m.moved) for c, m in found.items() if m.moved}
    print(f"without claims: moved {moved}; problems {[p for m in found.values() for p in m.problems()]}")
    # The unschedulable queue counts any pod the scheduler cannot place: expected to move here, it is not a DRA series.
    dra_only = {c: [k for k in ks if k != "scheduler_pending_pods{queue=unschedulable}"] for c, ks in moved.items()}
    assert not any(dra_only.values()), f"DRA series moved without any claim: {dra_only}"
