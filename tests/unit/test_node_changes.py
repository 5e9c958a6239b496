"""A cordon of the harness's is recorded on the node in the same patch, and undone only while it is still the run's."""

from __future__ import annotations

from types import SimpleNamespace

from dra_harness.checks.disruption import Disruptor
from dra_harness.kube import rest
from dra_harness.labels import CORDONED_BY_ANNOTATION, DISRUPTABLE_LABEL
from dra_harness.providers import node_changes
from tests.unit.fake_cluster import FakeKube

RUN = "run-a"


def _cluster(*names: str) -> FakeKube:
    kube = FakeKube()
    for name in names:
        kube.add(rest.NODES, name, labels={DISRUPTABLE_LABEL: "true"}, annotations={"other": "kept"})
    return kube


def _patches(kube: FakeKube) -> int:
    return sum(verb == "PATCH" for verb, _, _ in kube.calls)


def test_a_cordon_records_the_run_on_the_node_in_the_same_patch():
    kube = _cluster("n1")
    assert node_changes.cordon(kube, "n1", RUN)
    node = kube.node("n1")
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"] == {"other": "kept", CORDONED_BY_ANNOTATION: RUN}
    assert _patches(kube) == 1, "the record and the cordon must be one write: a kill between two would lose the record"


def test_a_node_without_annotations_gets_the_record_too():
    kube = FakeKube()
    kube.add(rest.NODES, "bare")
    assert node_changes.cordon(kube, "bare", RUN)
    assert node_changes.cordoned_by(kube.node("bare")) == RUN


def test_a_node_cordoned_already_is_left_as_found_and_not_recorded():
    kube = _cluster("n1")
    kube.operator_sets_unschedulable("n1", True)
    assert not node_changes.cordon(kube, "n1", RUN)
    assert node_changes.cordoned_by(kube.node("n1")) is None and _patches(kube) == 0


def test_the_runs_own_cordon_is_undone_with_its_record():
    kube = _cluster("n1")
    node_changes.cordon(kube, "n1", RUN)
    assert node_changes.uncordon(kube, "n1", RUN) is None
    node = kube.node("n1")
    assert not node["spec"].get("unschedulable")
    assert node["metadata"]["annotations"] == {"other": "kept"}


def test_an_operator_who_cordons_again_a_node_the_harness_cordoned_keeps_it_cordoned():
    kube = _cluster("n1")
    node_changes.cordon(kube, "n1", RUN)
    kube.operator_sets_unschedulable("n1", False, "kubectl-uncordon")
    kube.operator_sets_unschedulable("n1", True, "kubectl-cordon")
    why = node_changes.uncordon(kube, "n1", RUN)
    assert why and "cordoned again by kubectl-cordon" in why
    assert kube.node("n1")["spec"]["unschedulable"] is True
    assert node_changes.cordoned_by(kube.node("n1")) is None, "the record of a cordon no longer the run's is dropped"


def test_an_operator_who_uncordoned_the_node_meanwhile_is_not_overridden():
    kube = _cluster("n1")
    node_changes.cordon(kube, "n1", RUN)
    kube.operator_sets_unschedulable("n1", False, "kubectl-uncordon")
    assert "uncordoned by someone else" in (node_changes.uncordon(kube, "n1", RUN) or "")
    assert not kube.node("n1")["spec"].get("unschedulable")


def test_an_operator_who_removes_the_record_keeps_the_node_cordoned():
    kube = _cluster("n1")
    node_changes.cordon(kube, "n1", RUN)
    del kube.node("n1")["metadata"]["annotations"][CORDONED_BY_ANNOTATION]
    assert "does not record a cordon" in (node_changes.uncordon(kube, "n1", RUN) or "")
    assert kube.node("n1")["spec"]["unschedulable"] is True


def test_an_operators_cordon_landing_between_the_read_and_the_patch_fails_the_test_op_and_is_kept():
    kube = _cluster("n1")
    node_changes.cordon(kube, "n1", RUN)
    landed = []

    def operator(name: str) -> None:  # after the harness's first read of the node, before its patch
        if not landed:
            landed.append(name)
            kube.operator_sets_unschedulable(name, False, "kubectl-uncordon")
            kube.operator_sets_unschedulable(name, True, "kubectl-cordon")

    kube.after_read = operator
    why = node_changes.uncordon(kube, "n1", RUN)
    assert why and "kubectl-cordon" in why
    assert kube.node("n1")["spec"]["unschedulable"] is True


def test_a_status_update_between_the_read_and_the_patch_only_costs_a_second_read():
    kube = _cluster("n1")
    node_changes.cordon(kube, "n1", RUN)
    kube.after_read = lambda name: kube._bump(kube.node(name)) if len(kube.calls) < 4 else None  # a kubelet heartbeat
    assert node_changes.uncordon(kube, "n1", RUN) is None
    assert not kube.node("n1")["spec"].get("unschedulable")


def test_undoing_a_run_uncordons_only_the_nodes_that_record_it():
    kube = _cluster("ours", "other-run", "maintenance")
    node_changes.cordon(kube, "ours", RUN)
    node_changes.cordon(kube, "other-run", "run-b")
    kube.operator_sets_unschedulable("maintenance", True)
    assert node_changes.undo_run(kube, RUN) == []
    assert [n for n in ("ours", "other-run", "maintenance") if kube.node(n)["spec"].get("unschedulable")] == [
        "other-run", "maintenance"]


def _disruptor(kube: FakeKube) -> Disruptor:
    handle = SimpleNamespace(kube=kube, run_id=RUN, provider=SimpleNamespace(harness_operated=True))
    return Disruptor(handle, allowed=True)  # type: ignore[arg-type]  # only what cordon/uncordon read


def test_restoring_leaves_a_node_an_operator_took_over_during_the_test_and_says_so():
    kube = _cluster("n1")
    with _disruptor(kube).restoring("n1") as d:
        d.cordon("n1")
        kube.operator_sets_unschedulable("n1", False, "kubectl-uncordon")
        kube.operator_sets_unschedulable("n1", True, "kubectl-cordon")
    assert kube.node("n1")["spec"]["unschedulable"] is True
    assert "not done" in d.actions[-1] and "kubectl-cordon" in d.actions[-1]


def test_restoring_uncordons_the_drains_cordon():
    kube = _cluster("n1")
    with _disruptor(kube).restoring("n1") as d:
        d.drain("n1", timeout=0)
        assert node_changes.cordoned_by(kube.node("n1")) == RUN
    assert not kube.node("n1")["spec"].get("unschedulable") and node_changes.cordoned_by(kube.node("n1")) is None
