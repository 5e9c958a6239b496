"""A disruptor records a driver as stopped only after stopping it, so a refusal stays a refusal.

On a cluster whose driver DaemonSet has another name than the profile's, the old code added the
node to ``stopped`` before refusing; ``restoring()`` then waited 90 s for the replacement of a
driver it never stopped and reported a FAIL (five of them in one staging run).
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from dra_harness.checks.disruption import DisruptionRefused, Disruptor, RestoreFailed
from dra_harness.labels import DISRUPTABLE_LABEL

NODE = "gpu-node-1"


class _Kube:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    def get(self, res, name, namespace=None):
        return {"metadata": {"name": name, "labels": {DISRUPTABLE_LABEL: "true"}}, "spec": {}}

    def delete(self, res, name, namespace=None, grace_seconds=None):
        self.deleted.append(name)


def _cluster(pods: list[dict] | None) -> SimpleNamespace:
    return SimpleNamespace(
        provider=SimpleNamespace(harness_operated=False), kube=_Kube(), controls_driver=False,
        profile=SimpleNamespace(driver_daemonset=("dra-driver", "profile-name")),
        driver_pods=lambda node=None: pods)


@pytest.mark.parametrize("pods", [None, []], ids=["no-daemonset-found", "no-pod-on-the-node"])
def test_a_refused_driver_stop_is_not_restored_or_waited_for(pods):
    disruptor = Disruptor(_cluster(pods), allowed=True)  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(DisruptionRefused):
        with disruptor.restoring(NODE, deadline=30):
            disruptor.stop_driver(NODE)
    assert time.monotonic() - started < 1, "restoring() waited for a driver nobody stopped"
    assert not disruptor.stopped and not disruptor.deleted_pods


def test_a_driver_really_stopped_is_waited_for_until_its_replacement_is_ready():
    """Negative control: once a pod was deleted, restoring() does wait, and says so when none comes."""
    pod = {"metadata": {"name": "plugin-x", "uid": "u1"}, "status": {"phase": "Running"}}
    cluster = _cluster([pod])
    disruptor = Disruptor(cluster, allowed=True)  # type: ignore[arg-type]
    with pytest.raises(RestoreFailed, match="not replaced within"):
        with disruptor.restoring(NODE, deadline=0.3):
            disruptor.stop_driver(NODE)
    assert cluster.kube.deleted == ["plugin-x"] and disruptor.deleted_pods == {"u1"}


class _GoneOnce:
    """A watch that is 410 Gone first, then quiet; the list after it shows slice-b replaced slice-a."""

    def __init__(self, stop) -> None:
        self.stop, self.watches = stop, 0

    def watch(self, res, resource_version=None, field_selector=None, timeout_seconds=None):
        from dra_harness.kube import rest

        self.watches += 1
        if self.watches == 1:
            raise rest.Gone(410, "Expired", "too old resource version")
        self.stop.set()
        return iter(())

    def list_with_version(self, res, field_selector=None):
        return [{"metadata": {"name": "slice-b"}}], "42"


def test_a_slice_watch_too_far_behind_lists_again_and_records_what_it_missed():
    import threading

    from dra_harness.checks.disruption import RestartRecord, follow_slices

    stop = threading.Event()
    record = RestartRecord(NODE, kill=False, down_for=None)
    follow_slices(_GoneOnce(stop), "spec.nodeName=x", "1", {"slice-a"}, time.monotonic(), record, stop)
    assert [(kind, name) for _, kind, name in record.slice_events] == [("DELETED", "slice-a"), ("ADDED", "slice-b")]
    assert record.relists == 1
    # Negative control: a watch that is never Gone records nothing it did not see.
    quiet, stop = RestartRecord(NODE, kill=False, down_for=None), threading.Event()
    stop.set()
    follow_slices(_GoneOnce(stop), "spec.nodeName=x", "1", {"slice-a"}, time.monotonic(), quiet, stop)
    assert quiet.slice_events == [] and quiet.relists == 0
