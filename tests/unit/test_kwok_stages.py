"""A run's KWOK stages play the run's own pods only; any other pod on its nodes fails at once."""

from __future__ import annotations

import yaml

from dra_harness.labels import RUN_LABEL
from dra_harness.providers import kwok_stages
from dra_harness.providers.incluster_kwok import STAGES_DIR, ClusterKwok

RUN = "run-1234"
OURS = {"key": f'.metadata.labels["{RUN_LABEL}"]', "operator": "In", "values": [RUN]}


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def _pod_stages(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Stage" and d["spec"]["resourceRef"]["kind"] == "Pod"}


def test_every_pod_stage_that_fakes_a_state_requires_the_runs_label():
    stages = _pod_stages(_docs(kwok_stages.for_run(RUN)))
    faking = [name for name, s in stages.items() if "statusTemplate" in s["spec"]["next"]]
    assert {"pod-ready", "pod-complete-job", "pod-complete-after-run-duration"} <= set(faking)
    for name in faking:
        expressions = stages[name]["spec"]["selector"]["matchExpressions"]
        if name == kwok_stages.FOREIGN_STAGE:
            assert {**OURS, "operator": "NotIn"} in expressions
        else:
            assert OURS in expressions, name


def test_a_foreign_pending_pod_is_marked_failed_with_the_reason_and_no_run_stage_matches_it():
    stage = _pod_stages(_docs(kwok_stages.for_run(RUN)))[kwok_stages.FOREIGN_STAGE]
    rendered = yaml.safe_load(stage["spec"]["next"]["statusTemplate"].replace("{{ $now := Now }}", "")
                              .replace("{{ $now | Quote }}", '"now"'))
    assert rendered["phase"] == "Failed" and rendered["reason"] == kwok_stages.FOREIGN_REASON
    assert RUN in rendered["message"]
    assert stage["spec"]["next"]["event"]["type"] == "Warning"


def test_the_deletion_stage_still_removes_any_pod_its_owner_deleted():
    stage = _pod_stages(_docs(kwok_stages.for_run(RUN)))["pod-delete"]
    assert OURS not in stage["spec"]["selector"]["matchExpressions"]


def test_node_stages_and_kwoks_options_are_kept_as_shipped():
    shipped = _docs(kwok_stages.SHIPPED.read_text())
    run = _docs(kwok_stages.for_run(RUN))
    keep = [d for d in shipped if d["kind"] != "Stage" or d["spec"]["resourceRef"]["kind"] == "Node"]
    assert all(d in run for d in keep)


def test_the_shipped_stages_for_the_embedded_cluster_still_play_every_pod():
    stages = _pod_stages(_docs(kwok_stages.SHIPPED.read_text()))
    assert kwok_stages.FOREIGN_STAGE not in stages
    keys = [e["key"] for s in stages.values() for e in s["spec"]["selector"]["matchExpressions"]]
    assert OURS["key"] not in keys


def test_the_in_cluster_kwok_reads_the_runs_stages_from_a_configmap_of_its_namespace():
    kwok = ClusterKwok(kube=None, tag="t1", run_id=RUN, image="img")  # type: ignore[arg-type]
    kwok.kube = type("K", (), {"host": "https://10.0.0.1:6443"})()  # type: ignore[assignment]
    pod = kwok.deployment()["spec"]["template"]["spec"]
    assert f"--config={STAGES_DIR}/stages.yaml" in pod["containers"][0]["args"]
    assert pod["volumes"] == [{"name": "stages", "configMap": {"name": kwok.name}}]
    assert _docs(kwok.stages()["data"]["stages.yaml"]) == _docs(kwok_stages.for_run(RUN))
