"""The preflight for simulated nodes: which tenants' DaemonSets and spreads they would hurt, as the controllers judge it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from dra_harness.contention.scenario import load
from dra_harness.contention.topology import Topology
from dra_harness.errors import NotEstablished, Refused
from dra_harness.kube import builders
from dra_harness.labels import RUN_LABEL
from dra_harness.plugin import simulated
from dra_harness.providers import node_guard
from dra_harness.topology.fleet import TopologyFleet
from dra_harness.options import RunConfig
from dra_harness.plugin.stash import RUN_CONFIG

SMALL = Path(__file__).resolve().parents[2] / "suites" / "contention-small.yaml"
TAINT = {"key": "dra-harness.io/topology", "value": "t1", "effect": "NoSchedule"}
NODE = builders.simulated_node("topo-t1-0", {RUN_LABEL: "run1", "dra-harness.io/topology": "t1"}, TAINT, ("a", "b"))
ALL = [{"operator": "Exists"}]


def _ds(name: str, **spec) -> dict:
    return {"metadata": {"namespace": "tenant", "name": name},
            "spec": {"template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [], **spec}}}}


def _pod(name: str, owner: str | None = None, **spec) -> dict:
    meta: dict = {"namespace": "tenant", "name": name}
    if owner:
        meta["ownerReferences"] = [{"kind": owner.split("/")[0], "name": owner.split("/")[1]}]
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running"}}


HOSTNAME_SPREAD = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}}}]


@pytest.mark.parametrize(("toleration", "tolerated"), [
    ({"operator": "Exists"}, True),
    ({"operator": "Exists", "effect": "NoSchedule"}, True),
    ({"operator": "Exists", "effect": "NoExecute"}, False),
    ({"key": TAINT["key"], "operator": "Exists"}, True),
    ({"key": TAINT["key"], "operator": "Equal", "value": "t1"}, True),
    ({"key": TAINT["key"], "operator": "Equal", "value": "other"}, False),
    ({"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}, False),
])
def test_a_toleration_tolerates_the_taint_as_the_scheduler_judges_it(toleration, tolerated):
    assert node_guard.tolerates([toleration], TAINT) is tolerated


def test_simulated_nodes_carry_no_hostname_or_os_label_in_any_fleet():
    fleets = [Topology(None, load(SMALL), "run1", tag="t1").node_bodies(),  # type: ignore[arg-type]
              TopologyFleet(None, "run1").node_bodies()]  # type: ignore[arg-type]
    for body in [b for f in fleets for b in f] + [NODE]:
        labels = body["metadata"]["labels"]
        assert "kubernetes.io/hostname" not in labels and "kubernetes.io/os" not in labels
        assert labels[RUN_LABEL] == "run1" and body["spec"]["taints"][0]["effect"] == "NoSchedule"


def test_a_tolerate_all_daemonset_without_node_selection_is_listed():
    found = node_guard.hurt([_ds("log-shipper", tolerations=ALL)], [], [], [NODE], "run1")
    assert found == ["DaemonSet tenant/log-shipper (tolerates the nodes' taint, selects them)"]


def test_a_daemonset_that_selects_linux_nodes_or_does_not_tolerate_the_taint_is_not():
    linux = _ds("kube-proxy", tolerations=ALL, nodeSelector={"kubernetes.io/os": "linux"})
    affinity = _ds("cni", tolerations=ALL, affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}})
    plain = _ds("exporter", tolerations=[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}])
    assert node_guard.hurt([linux, affinity, plain], [], [], [NODE], "run1") == []


def test_a_required_affinity_that_excludes_only_other_nodes_still_selects_ours():
    spec = {"tolerations": ALL, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"}]}]}}}}
    assert node_guard.lands(spec, NODE)


def test_the_runs_own_daemonset_is_left_out():
    ours = _ds("driver", tolerations=ALL)
    ours["spec"]["template"]["metadata"]["labels"][RUN_LABEL] = "run1"
    assert node_guard.hurt([ours], [], [], [NODE], "run1") == []


def test_a_hostname_spread_is_not_hurt_by_nodes_without_a_hostname_label_and_is_by_nodes_with_one():
    web = {"metadata": {"namespace": "tenant", "name": "web"},
           "spec": {"template": {"metadata": {}, "spec": {"topologySpreadConstraints": HOSTNAME_SPREAD}}}}
    assert node_guard.hurt([], [web], [], [NODE], "run1") == []
    with_hostname = {**NODE, "metadata": {**NODE["metadata"], "labels": {**NODE["metadata"]["labels"],
                                                                         "kubernetes.io/hostname": "topo-t1-0"}}}
    assert node_guard.hurt([], [web], [], [with_hostname], "run1") == [
        "Deployment tenant/web (DoNotSchedule spread on kubernetes.io/hostname)"]
    # Honouring taints, a pod that does not tolerate ours does not count the node; ScheduleAnyway never blocks.
    honour = [{**HOSTNAME_SPREAD[0], "nodeTaintsPolicy": "Honor"}]
    soft = [{**HOSTNAME_SPREAD[0], "whenUnsatisfiable": "ScheduleAnyway"}]
    pods = [_pod("a", "StatefulSet/db", topologySpreadConstraints=honour), _pod("b", None, topologySpreadConstraints=soft)]
    assert node_guard.hurt([], [], pods, [with_hostname], "run1") == []
    pods = [_pod("a", "StatefulSet/db", topologySpreadConstraints=HOSTNAME_SPREAD),
            _pod("b", "StatefulSet/db", topologySpreadConstraints=HOSTNAME_SPREAD)]
    assert node_guard.hurt([], [], pods, [with_hostname], "run1") == [
        "StatefulSet tenant/db (DoNotSchedule spread on kubernetes.io/hostname)"]


def test_a_tolerate_all_workload_of_another_kind_is_listed_by_its_template_or_its_unbound_pod():
    """Issue 60: only DaemonSets were checked, so a tolerate-all Job's next pod went to an empty simulated node
    (the scheduler scores it highest), failed there, and counted against the Job's backoffLimit."""
    web = {"metadata": {"namespace": "tenant", "name": "web"},
           "spec": {"template": {"metadata": {}, "spec": {"tolerations": ALL}}}}
    job = {**web, "metadata": {"namespace": "tenant", "name": "etl"}}
    done = {**job, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert node_guard.hurt([], [web], [], [NODE], "run1", [job, done]) == [
        "Deployment tenant/web (tolerates the nodes' taint, selects them: a pod placed there fails)",
        "Job tenant/etl (tolerates the nodes' taint, selects them: a pod placed there fails)"]
    unbound = _pod("a", "StatefulSet/db", tolerations=ALL)
    bound = _pod("b", None, tolerations=ALL, nodeName="real-1")  # running elsewhere: it does not move
    assert node_guard.hurt([], [], [unbound, bound], [NODE], "run1") == [
        "StatefulSet tenant/db (tolerates the nodes' taint, selects them: a pod placed there fails)"]
    # Controls: one that does not tolerate the taint, one that selects linux nodes, the run's own, a finished Job.
    linux = {**web, "spec": {"template": {"metadata": {}, "spec": {
        "tolerations": ALL, "nodeSelector": {"kubernetes.io/os": "linux"}}}}}
    plain = {**web, "spec": {"template": {"metadata": {}, "spec": {}}}}
    ours = {**web, "spec": {"template": {"metadata": {"labels": {RUN_LABEL: "run1"}}, "spec": {"tolerations": ALL}}}}
    assert node_guard.hurt([], [linux, plain, ours], [], [NODE], "run1", [done]) == []


class _Kube:
    def __init__(self, daemonsets: list[dict]) -> None:
        self.daemonsets = daemonsets

    def list(self, res, *a, **kw) -> list[dict]:
        return self.daemonsets if res.plural == "daemonsets" else []


def test_the_check_refuses_in_one_line_naming_each_and_counting_past_ten():
    many = [_ds(f"agent-{i}", tolerations=ALL) for i in range(12)]
    with pytest.raises(Refused) as e:
        node_guard.check(_Kube(many), [NODE], "run1")  # type: ignore[arg-type]
    text = str(e.value)
    assert "\n" not in text and "tenant/agent-0 " in text and "tenant/agent-9 " in text and "and 2 more" in text
    node_guard.check(_Kube([]), [NODE], "run1")  # type: ignore[arg-type]


def test_a_run_refused_by_the_preflight_starts_no_kwok_adds_no_node_and_the_check_is_not_established(monkeypatch):
    config = SimpleNamespace(stash={RUN_CONFIG: RunConfig(allow_contention=True, simulated_nodes=4, kubeconfig="/k")})
    cluster = SimpleNamespace(kube=_Kube([_ds("log-shipper", tolerations=ALL)]), run_id="run1")
    monkeypatch.setattr(simulated.simulated_nodes.LocalKwok, "start", lambda self: pytest.fail("KWOK started"))
    with pytest.raises(NotEstablished, match="tenant/log-shipper"):  # the tenants forbid it: no product fault
        simulated.run_kwok(config, cluster, [NODE], "t1", "the topology suite")  # type: ignore[arg-type]
