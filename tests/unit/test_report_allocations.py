"""The report's allocation table: pod -> claim -> device -> model, and workloads whose replicas differ."""

from __future__ import annotations

import json

import pytest

from dra_harness.report import write_report
from dra_harness.report.allocations import FILE, mixed
from dra_harness.report.summary import RunDirError, build_summary
from tests.unit.report_runs import make_run

TEST = "suites/test_allocation.py::test_template_pods_get_distinct_devices"


def _row(pod: str, workload: str, model: str, node: str = "n0") -> dict:
    return {"test": TEST, "namespace": "ns", "workload": workload, "pod": pod, "node": node,
            "claims": [{"claim": f"{pod}-gpu", "health": {}, "devices": [{"device": f"drv/{node}/gpu-{pod[-1]}", "model": model}]}]}


def test_a_workload_whose_replicas_got_two_models_is_one_finding_naming_each_replica():
    rows = [_row("web-1", "Deployment/web", "A"), _row("web-2", "Deployment/web", "A"), _row("web-3", "Deployment/web", "B")]
    assert mixed(rows) == [{"test": TEST, "message": "Deployment/web in ns: replicas got different device models: "
                                                     "A (2: web-1, web-2); B (1: web-3)"}]


def test_bare_pods_and_workloads_on_one_model_raise_nothing():
    rows = [_row("p-1", "Pod/p-1", "A"), _row("p-2", "Pod/p-2", "B"), _row("job-1", "Job/j", "A"), _row("job-2", "Job/j", "A")]
    assert mixed(rows) == []


def test_the_report_lists_every_allocation_and_raises_the_mixed_workload_as_a_finding(tmp_path):
    run = make_run(tmp_path / "run", contention_scale=None)
    with open(run / FILE, "w") as f:
        for r in (_row("web-1", "Deployment/web", "A"), _row("web-2", "Deployment/web", "B", node="n1")):
            f.write(json.dumps(r) + "\n")
        f.write('{"test": "cut by a kill')
    summary = build_summary(run)
    assert summary["allocations"]["pods"] == 2
    assert [f["concern"] for f in summary["findings"] if "replicas got different" in f["message"]] == ["allocation"]
    html = write_report(run).read_text()
    assert "Which claim was allocated to which pod" in html and "drv/n1/gpu-2</code> (B)" in html
    md = (run / "signoff.md").read_text()
    assert "| Deployment/web | web-2 | n1 | web-2-gpu | drv/n1/gpu-2 (B) | not reported |" in md


def test_an_allocation_file_that_is_not_allocation_records_is_one_line_naming_it(tmp_path):
    run = make_run(tmp_path / "run", contention_scale=None)
    (run / FILE).write_text('{"test": "x", "claims": "none"}\n')
    with pytest.raises(RunDirError, match=FILE):
        build_summary(run)


def test_the_health_the_kubelet_reported_is_shown_per_claim(tmp_path):
    run = make_run(tmp_path / "run", contention_scale=None)
    row = _row("p-1", "Pod/p-1", "A")
    row["claims"][0]["health"] = {"k8s.gpu.example.com/gpu=common": "Unknown"}
    (run / FILE).write_text(json.dumps(row) + "\n")
    write_report(run)
    assert "| drv/n0/gpu-1 (A) | Unknown (k8s.gpu.example.com/gpu=common) |" in (run / "signoff.md").read_text()
