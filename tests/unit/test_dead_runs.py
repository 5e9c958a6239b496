"""Which runs the sweep of dead runs takes, and which it never does, on the API server's clock (plain data).

The integration tests (tests/integration/test_sweep_faults.py) kill a real run; these pin the judgement: a Lease
not renewed for its duration, a run with no Lease older than the bound, and what is never swept (this run, a live
run, a canary, a kept namespace).
"""

from __future__ import annotations

import datetime as dt

import pytest

from dra_harness.kube import rest
from dra_harness.labels import CANARY_LABEL, KEPT_LABEL, RUN_LABEL
from dra_harness.providers import dead_runs, liveness, sweep
from dra_harness.providers.lock import KIND_LABEL, LEASES
from tests.unit.fake_cluster import FakeKube


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch):
    monkeypatch.setattr(sweep.time, "sleep", lambda s: None)


def _lease(kube: FakeKube, run: str, renewed_s_ago: float, seconds: int = 135) -> None:
    lease = kube.add(LEASES, liveness.lease_name(run), "default", labels={RUN_LABEL: run, KIND_LABEL: liveness.RUN_LEASE},
                     spec={"leaseDurationSeconds": seconds}, age_s=3600)
    stamp = (kube.now - dt.timedelta(seconds=renewed_s_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    lease["metadata"]["managedFields"] = [{"manager": "watchdog", "time": stamp}]


def _cluster() -> FakeKube:
    kube = FakeKube()
    kube.add(rest.NAMESPACES, "dra-dead", labels={RUN_LABEL: "dead"}, age_s=200)
    kube.add(rest.DEVICE_CLASSES, "dc-dead", labels={RUN_LABEL: "dead"}, age_s=200)
    _lease(kube, "dead", renewed_s_ago=140)
    kube.add(rest.NAMESPACES, "dra-live", labels={RUN_LABEL: "live"}, age_s=7200)
    _lease(kube, "live", renewed_s_ago=10)
    kube.add(rest.NAMESPACES, "dra-canary-c", labels={RUN_LABEL: "canary", CANARY_LABEL: "true"}, age_s=86400)
    kube.add(rest.NAMESPACES, "dra-kept", labels={RUN_LABEL: "kept", KEPT_LABEL: "true"}, age_s=86400)
    kube.add(rest.NAMESPACES, "dra-me", labels={RUN_LABEL: "me"}, age_s=86400)
    kube.add(rest.NAMESPACES, "dra-young", labels={RUN_LABEL: "young"}, age_s=600)  # no Lease, not old enough
    kube.add(rest.NAMESPACES, "dra-old", labels={RUN_LABEL: "old"}, age_s=7200)  # no Lease, older than the bound
    return kube


def test_runs_whose_lease_lapsed_or_without_one_past_the_bound_are_swept_and_said_in_one_line_each():
    kube = _cluster()
    said: list[str] = []
    dead = dead_runs.sweep(kube, "default", said.append, spare=frozenset({"me"}))
    assert [d.run_id for d in dead] == ["dead", "old"]
    names = {name for _, _, name in kube.objects}
    assert not {"dra-dead", "dc-dead", liveness.lease_name("dead"), "dra-old"} & names
    assert {"dra-live", liveness.lease_name("live"), "dra-canary-c", "dra-kept", "dra-me", "dra-young"} <= names
    assert said[0] == ("dra-harness: removed what dead run dead left (its Lease not renewed for 140 s): "
                       "DeviceClass/dc-dead, Namespace/dra-dead")
    assert said[1].startswith("dra-harness: removed what dead run old left (no Lease, nothing of it created in the last 7200 s)")
    assert len(said) == 2


def test_a_lease_renewed_within_its_duration_keeps_a_run_alive_whatever_its_objects_age():
    kube = FakeKube()
    kube.add(rest.NAMESPACES, "dra-a", labels={RUN_LABEL: "a"}, age_s=10**6)
    _lease(kube, "a", renewed_s_ago=134)
    assert dead_runs.find(kube, "default") == []
    kube.now += dt.timedelta(seconds=3)
    assert [d.run_id for d in dead_runs.find(kube, "default")] == ["a"]


def test_a_cluster_that_does_not_answer_is_said_in_one_line_and_stops_nothing():
    kube = _cluster()

    def before(verb: str, kind: str, name: str) -> None:
        if verb == "LIST":
            raise rest.ApiError(503, "ServiceUnavailable", "restarting")

    kube.before = before
    said: list[str] = []
    assert dead_runs.sweep(kube, "default", said.append) == []
    assert said == ["dra-harness: could not look for what dead runs left: 503 ServiceUnavailable: restarting"]
