"""A pytest plugin the twin's faults load into the run under test (``-p tests.integration.twins.hooks``).

It is the test's, never shipped: it lets a fault act at one point of the run's life, and puts
one of the harness's rules back as it was before #34, so a negative control can show the same
fault catching the old behaviour.

- ``DRA_HARNESS_TWIN_GATE=DIR``: when the last test's teardown begins, it says so in ``DIR``
  and waits until the injector has turned the storm on. The last test is made one that runs on
  any shape and leaves objects to take off (:data:`LAST`: a claim and a pending pod in its
  namespace, its Lease), so the storm meets the run's whole clean-up: that namespace, the
  session's objects, the Leases, the sweep.
- ``DRA_HARNESS_TWIN_SKEW_S=S``: this run's wall clock is S seconds ahead, as another machine's may be:
  every Lease the run writes is stamped by it (libfaketime cannot do this for Python 3.11:
  its ``time.sleep`` fails with EINVAL under it).
- ``DRA_HARNESS_TWIN_OLD=RULE``: ``sweep`` (a step turned away with 429 is not tried again),
  ``lock`` (a lease is expired once its ``renewTime`` is older than its duration by this
  process's clock), ``cordon`` (a cordon is a plain patch, no record on the node).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import pytest

from dra_harness.kube import rest

GATE_ENV, OLD_ENV, SKEW_ENV = "DRA_HARNESS_TWIN_GATE", "DRA_HARNESS_TWIN_OLD", "DRA_HARNESS_TWIN_SKEW_S"
GATE_WAIT_S = 60.0
OLD_RULES = ("sweep", "lock", "cordon")
#: Moved to the end of the run under a storm: it needs no free device and leaves a claim and a pod to take off.
LAST = "test_an_unsatisfiable_selector_leaves_the_pod_pending_with_the_schedulers_reason"


def pytest_configure(config: pytest.Config) -> None:
    if skew := float(os.environ.get(SKEW_ENV) or 0):
        from dra_harness.providers import lock

        lock._now = lambda: dt.datetime.now(dt.UTC) + dt.timedelta(seconds=skew)
    old = os.environ.get(OLD_ENV, "")
    if old == "sweep":
        from dra_harness.providers import sweep

        sweep.transient = lambda e: isinstance(e, rest.Unreachable)
    elif old == "lock":
        from dra_harness.providers.lock import ClusterLock

        def wall_clock_expiry(self, lease):
            spec = lease["spec"]
            at = dt.datetime.strptime((spec.get("renewTime") or spec["acquireTime"]).replace("Z", "+0000"),
                                      "%Y-%m-%dT%H:%M:%S.%f%z")
            return self.wall() - at > dt.timedelta(seconds=spec["leaseDurationSeconds"])

        ClusterLock._expired = wall_clock_expiry
    elif old == "cordon":
        from dra_harness.providers import node_changes

        def unrecorded(kube, node, run_id):
            if kube.get(rest.NODES, node)["spec"].get("unschedulable"):
                return False
            kube.patch(rest.NODES, node, {"spec": {"unschedulable": True}})
            return True

        node_changes.cordon = unrecorded


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get(GATE_ENV):
        items.sort(key=lambda item: item.name == LAST)  # stable: the others keep their order


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    gate = os.environ.get(GATE_ENV)
    if not gate or nextitem is not None:
        return
    Path(gate, "tests-over").touch()
    end = time.monotonic() + GATE_WAIT_S
    while not Path(gate, "storm-on").exists() and time.monotonic() < end:
        time.sleep(0.1)
