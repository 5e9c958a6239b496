"""The end-of-run sweep finishes under a 429 storm, goes past an object it may not delete, and undoes the run's cordons."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from dra_harness.errors import InputError
from dra_harness.kube import rest
from dra_harness.plugin import inputs, pytest_plugin
from dra_harness.labels import CORDONED_BY_ANNOTATION, KEPT_LABEL, RUN_LABEL, SIMULATED_NODE_LABEL
from dra_harness.providers import node_changes, sweep
from dra_harness.providers.lock import LEASES
from dra_harness.options import RunConfig
from dra_harness.plugin.stash import RUN_CONFIG
from tests.unit.fake_cluster import FakeKube

RUN = "run-a"


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch):
    """The passes' pauses only stretch the test; how often a step is tried is what is checked."""
    monkeypatch.setattr(sweep.time, "sleep", lambda s: None)


def _shared_cluster() -> FakeKube:
    """What a run leaves on a shared cluster after a kill mid-drain, next to another run's objects and a tenant's node."""
    kube = FakeKube()
    kube.add(rest.NAMESPACES, "dra-a", labels={RUN_LABEL: RUN})
    kube.add(rest.PRIORITY_CLASSES, "pc-a", labels={RUN_LABEL: RUN})
    kube.add(rest.DEVICE_CLASSES, "dc-a", labels={RUN_LABEL: RUN})
    kube.add(LEASES, "dra-harness-a", "default", labels={RUN_LABEL: RUN})
    kube.add(rest.NODES, "sim-a", labels={RUN_LABEL: RUN, SIMULATED_NODE_LABEL: "t"})
    kube.add(rest.NODES, "gpu-0")
    node_changes.cordon(kube, "gpu-0", RUN)  # a drain's cordon, its run killed before the restore
    kube.add(rest.NAMESPACES, "dra-b", labels={RUN_LABEL: "run-b"})
    kube.add(rest.DEVICE_CLASSES, "dc-b", labels={RUN_LABEL: "run-b"})
    kube.add(rest.NODES, "tenant", labels={RUN_LABEL: RUN})  # a real node the run labelled is never deleted
    return kube


def _left_of(kube: FakeKube, run: str) -> list[str]:
    return sorted(f"{kind}/{name}" for (kind, _, name), o in kube.objects.items()
                  if o["metadata"]["labels"].get(RUN_LABEL) == run and name != "tenant")


def _storm(kube: FakeKube, times: int, verbs: tuple[str, ...] = ("DELETE", "PATCH", "LIST")) -> Counter:
    """Every request of ``verbs`` is answered 429 its first ``times`` tries (each object, each list, separately)."""
    tries: Counter = Counter()

    def before(verb: str, kind: str, name: str) -> None:
        if verb in verbs:
            tries[verb, kind, name] += 1
            if tries[verb, kind, name] <= times:
                raise rest.ApiError(429, "TooManyRequests", "the server has received too many requests")

    kube.before = before
    return tries


def test_a_sweep_under_a_429_storm_leaves_nothing_of_the_run():
    kube = _shared_cluster()
    _storm(kube, times=3)
    assert sweep.sweep_run(kube, RUN, timeout=60) == []
    assert _left_of(kube, RUN) == []
    assert _left_of(kube, "run-b") == ["DeviceClass/dc-b", "Namespace/dra-b"]
    gpu = kube.node("gpu-0")
    assert not gpu["spec"].get("unschedulable") and CORDONED_BY_ANNOTATION not in gpu["metadata"]["annotations"]
    assert "tenant" in {name for _, _, name in kube.objects}


def test_a_sweep_under_5xx_and_an_unreachable_server_still_finishes():
    kube = _shared_cluster()
    answers = iter([rest.ApiError(503, "ServiceUnavailable", "etcd leader changed"), rest.Unreachable("refused")] * 3)

    def before(verb: str, kind: str, name: str) -> None:
        if verb == "DELETE":
            error = next(answers, None)
            if error:
                raise error

    kube.before = before
    assert sweep.sweep_run(kube, RUN, timeout=60) == []
    assert _left_of(kube, RUN) == []


def test_an_object_the_sweep_may_not_delete_does_not_stop_the_others_and_is_reported_with_why():
    kube = _shared_cluster()

    def before(verb: str, kind: str, name: str) -> None:
        if verb == "DELETE" and name == "pc-a":
            raise rest.ApiError(403, "Forbidden", "priorityclasses is forbidden")

    kube.before = before
    left = sweep.sweep_run(kube, RUN, timeout=1)
    assert left == ["PriorityClass/pc-a (403 Forbidden: priorityclasses is forbidden)"]
    assert _left_of(kube, RUN) == ["PriorityClass/pc-a"]
    assert [v for v, k, n in kube.calls if (v, n) == ("DELETE", "pc-a")] == ["DELETE"], "a 403 is not retried"


def test_objects_whose_delete_was_refused_for_good_are_reported_at_once_not_waited_for(monkeypatch):
    """They will not go by themselves: the sweep names them and returns, rather than looking again until its
    deadline (the staging twin's control of the old 429 rule waited its whole 120 s so)."""
    kube = _shared_cluster()

    def before(verb: str, kind: str, name: str) -> None:
        if verb == "DELETE" and name in ("pc-a", "dra-a"):
            raise rest.ApiError(403, "Forbidden", f"{name} is forbidden")

    kube.before = before
    looks = iter(range(10**6))  # the clock moves a second at each look at it
    monkeypatch.setattr(sweep.time, "monotonic", lambda: float(next(looks)))
    left = sweep.sweep_run(kube, RUN, timeout=600)
    assert sorted(left) == ["Namespace/dra-a (403 Forbidden: dra-a is forbidden)",
                            "PriorityClass/pc-a (403 Forbidden: pc-a is forbidden)"], left
    assert next(looks) < 60, "the sweep waited for objects it could not delete"


def test_a_storm_that_outlasts_the_deadline_is_reported_not_waited_out(monkeypatch):
    kube = _shared_cluster()
    _storm(kube, times=10**6, verbs=("DELETE",))
    clock = iter(range(0, 10**6, 7))  # each look at the clock moves it 7 s on: the deadline comes after a few passes
    monkeypatch.setattr(sweep.time, "monotonic", lambda: float(next(clock)))
    left = sweep.sweep_run(kube, RUN, timeout=60)
    assert "Namespace/dra-a (429 TooManyRequests: the server has received too many requests)" in left
    assert not kube.node("gpu-0")["spec"].get("unschedulable"), "the node's uncordon is a PATCH: not in this storm"


def test_the_sweep_leaves_a_node_an_operator_took_over_after_the_kill():
    kube = _shared_cluster()
    kube.operator_sets_unschedulable("gpu-0", False, "kubectl-uncordon")
    kube.operator_sets_unschedulable("gpu-0", True, "kubectl-cordon")
    assert sweep.sweep_run(kube, RUN, timeout=10) == []
    assert kube.node("gpu-0")["spec"]["unschedulable"] is True


def test_a_run_id_whose_objects_are_on_the_cluster_is_refused_in_one_line():
    kube = _shared_cluster()
    kube.calls.clear()
    with pytest.raises(InputError) as e:
        sweep.refuse_reused_run_id(kube, RUN)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"--run-id {RUN}: this cluster already holds objects")
    assert "Namespace/dra-a" in message and "and " in message  # five named, the rest counted
    assert not [c for c in kube.calls if c[0] not in ("GET", "LIST")], "a refusal touches nothing"


@pytest.mark.parametrize("leftover", ["kept namespace", "lease", "cordon record"])
def test_any_leftover_of_the_run_makes_its_id_unusable(leftover):
    kube = FakeKube()
    kube.add(rest.NODES, "gpu-0")
    if leftover == "kept namespace":  # the sweep spares it, so a second run of that id would adopt it
        kube.add(rest.NAMESPACES, "dra-kept", labels={RUN_LABEL: RUN, KEPT_LABEL: "true"})
    elif leftover == "lease":
        kube.add(LEASES, "dra-harness-shared", "default", labels={RUN_LABEL: RUN})
    else:
        node_changes.cordon(kube, "gpu-0", RUN)
    with pytest.raises(InputError):
        sweep.refuse_reused_run_id(kube, RUN)


def test_a_new_run_id_is_not_refused():
    sweep.refuse_reused_run_id(_shared_cluster(), "run-c")


def _provider(kube: FakeKube | None) -> SimpleNamespace:
    """What :func:`inputs.check` reads of a provider on a cluster that outlives the run (``kube``) or not (None)."""
    return SimpleNamespace(config=RunConfig(), run_id=RUN, check_inputs=lambda: None, kube_before_run=lambda: kube)


def test_the_plugin_refuses_a_reused_run_id_in_one_usage_line_and_will_sweep_nothing():
    config = SimpleNamespace(stash={pytest_plugin.PROVIDER: _provider(_shared_cluster()), RUN_CONFIG: RunConfig()},
                             getoption=lambda name: None)
    with pytest.raises(pytest.UsageError) as e:
        pytest_plugin._check_inputs(config)
    assert str(e.value).startswith(f"--run-id {RUN}: ") and len(str(e.value).splitlines()) == 1
    assert pytest_plugin.INPUTS_OK not in config.stash, "a refused run must not sweep the other run's objects at exit"


def test_a_cluster_the_run_brings_up_is_not_asked():
    inputs.check(_provider(None), None)  # type: ignore[arg-type]  # only what check reads
