"""Claims another run holds are another workload's: an exclusive test does not wait for them, the preflight counts
their devices as held by others.

The fault, through the real thing: a claim labelled with another run id (what ``dra-harness canary`` holds across
an upgrade, or what a killed run leaves), allocated by a running pod on a real embedded API server and scheduler.
Before, ``wait_until_quiet`` waited for claims of *any* run on a shared cluster: every exclusive test timed out
after 120 s and FAILed, while the preflight counted those devices free.
"""

from __future__ import annotations

import time

import pytest

from dra_harness.checks import preflight
from dra_harness.kube import builders, rest
from dra_harness.kube.pods import allocated_devices, wait_running
from dra_harness.labels import RUN_LABEL

pytestmark = pytest.mark.cluster
OTHER = "other-run"


def _others_claim(handle) -> dict:
    """A namespace, claim and running pod of another run; the claim, allocated."""
    ns = "dra-canary-other"
    handle.kube.create(rest.NAMESPACES, {"metadata": {"name": ns, "labels": {RUN_LABEL: OTHER}}})
    handle.kube.create(rest.RESOURCE_CLAIMS, builders.claim("held", OTHER, [handle.request()]), ns)
    handle.kube.create(rest.PODS, builders.pod("holder", OTHER, claims={"gpu": {"claim": "held"}}), ns)
    wait_running(handle.kube, ns, "holder", 60)
    claim = handle.kube.get(rest.RESOURCE_CLAIMS, "held", ns)
    assert claim.get("status", {}).get("allocation"), "the other run's claim holds a device"
    return claim


def test_an_exclusive_test_does_not_wait_for_another_runs_claims_and_the_preflight_counts_them_held(handle):
    assert handle.provider.outlives_run, "a cluster the run shares with others (a named embedded cluster)"
    claim = _others_claim(handle)
    started = time.monotonic()
    handle.wait_until_quiet(timeout=20)  # before: a WaitError after 20 s, "still allocated: dra-canary-other/held"
    assert time.monotonic() - started < 5

    facts = preflight.Facts(handle.run_id, handle.driver)
    preflight._nodes(handle, facts)
    device = allocated_devices(claim)[0]
    node = next(n for n in facts.nodes.values() if device.device in n.held_by_others)  # before: counted free
    assert node.name not in facts.whole_free_nodes()
