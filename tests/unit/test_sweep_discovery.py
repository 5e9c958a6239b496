"""A sweep whose discovery is turned away for a moment still finds the run's DeviceTaintRules; one turned away
until its deadline says so, and is not clean.

Why: a control plane restarting behind a load balancer answers 503 for seconds. Discovery's 503 was taken for
"not served", so a killed run's watchdog swept without DeviceTaintRules (a NoExecute one evicts others' pods) and
reported nothing left. The integration test (tests/integration/test_sweep_faults.py) injects the same fault
through a real API server's front end; these cover the sweep's answers with plain data.
"""

from __future__ import annotations

import pytest

from dra_harness.kube import rest
from dra_harness.labels import RUN_LABEL
from dra_harness.providers import sweep
from tests.unit.fake_cluster import FakeKube

RUN = "run-a"
RULES = rest.Resource("resource.k8s.io", "v1", "devicetaintrules", "DeviceTaintRule", False)


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch):
    monkeypatch.setattr(sweep.time, "sleep", lambda s: None)


def _with_a_taint_rule() -> FakeKube:
    kube = FakeKube()
    kube.served["/apis/resource.k8s.io/v1"] = ["devicetaintrules", "resourceclaims"]
    kube.add(RULES, "evict-a", labels={RUN_LABEL: RUN})
    kube.add(rest.NAMESPACES, "dra-a", labels={RUN_LABEL: RUN})
    return kube


def _discovery_answers_503(kube: FakeKube, times: int) -> None:
    """resource.k8s.io's discovery is answered 503 its first ``times`` asks (a front end whose backend restarts)."""
    asked = [0]

    def before(verb: str, kind: str, name: str) -> None:
        if kind == "discovery" and name.startswith("/apis/resource.k8s.io/"):
            asked[0] += 1
            if asked[0] <= times:
                raise rest.ApiError(503, "ServiceUnavailable", "the backend is restarting")

    kube.before = before


def test_served_raises_on_a_503_instead_of_saying_not_served():
    kube = _with_a_taint_rule()
    _discovery_answers_503(kube, times=1)
    with pytest.raises(rest.ApiError) as e:
        rest.device_taint_rules(kube)
    assert e.value.status == 503
    assert rest.device_taint_rules(kube) == RULES


def test_a_sweep_during_a_503_on_discovery_deletes_the_runs_device_taint_rule():
    kube = _with_a_taint_rule()
    _discovery_answers_503(kube, times=3)
    assert sweep.sweep_run(kube, RUN, timeout=60) == []
    assert ("DeviceTaintRule", None, "evict-a") not in kube.objects, "the NoExecute rule survived the sweep"


def test_a_discovery_unanswered_until_the_deadline_is_reported_not_clean(monkeypatch):
    kube = _with_a_taint_rule()
    _discovery_answers_503(kube, times=10**6)
    looks = iter(range(10**6))  # a second passes at each look at the clock
    monkeypatch.setattr(sweep.time, "monotonic", lambda: float(next(looks)))
    left = sweep.sweep_run(kube, RUN, timeout=30)
    assert left == ["DeviceTaintRule/? (could not tell whether it is served: 503 ServiceUnavailable: the backend is restarting)"]
    assert ("Namespace", None, "dra-a") not in kube.objects, "the kinds it could see were swept all the same"


def test_a_kind_whose_list_is_turned_away_at_the_last_look_is_reported_not_clean(monkeypatch):
    kube = _with_a_taint_rule()
    deleted = []

    def before(verb: str, kind: str, name: str) -> None:
        if verb == "DELETE":
            deleted.append(name)
        if verb == "LIST" and kind == "PriorityClass" and deleted:
            raise rest.Unreachable("API server unreachable: NewConnectionError")

    kube.before = before
    looks = iter(range(10**6))
    monkeypatch.setattr(sweep.time, "monotonic", lambda: float(next(looks)))
    left = sweep.sweep_run(kube, RUN, timeout=30)
    assert left == ["PriorityClass/? (could not list: API server unreachable: NewConnectionError)"]
