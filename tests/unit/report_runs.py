"""Synthetic run directories for the report tests: the files a run writes, with chosen outcomes.

Only the report's pure logic is tested on these; the real-run tests in
tests/integration produce the same files from a real cluster.
"""

from __future__ import annotations

import json
import shutil
import time
from functools import cache
from pathlib import Path
from xml.sax.saxutils import quoteattr

from dra_harness.report import rundir
from dra_harness.report.plots import durations

DATA = Path(__file__).with_name("data")

GATES_137 = ["DRAConsumableCapacity", "DRADeviceTaintRules", "DRADeviceTaints", "DRAPartitionableDevices", "DynamicResourceAllocation"]

#: (module, test, outcome, seconds, evidence records)
DEFAULT_TESTS = [
    ("inventory", "test_device_counts_match_the_expected_hardware", "passed", 0.4, []),
    ("allocation", "test_a_claim_for_several_devices_gets_distinct_devices_on_one_node", "passed", 1.2,
     [{"count": 4, "node": "gpu-node-1"}]),
    ("sharing", "test_pods_using_templates_never_share_a_device", "passed", 2.0, [{"claims_checked": 8}]),
    ("sharing", "test_no_existing_claim_is_shared_across_tenants", "passed", 0.3, [{"claims_audited": 3, "findings": []}]),
    ("node_drain", "test_draining_a_node_frees_its_devices_and_replacements_get_new_ones_elsewhere", "passed", 6.0,
     [{"node": "gpu-node-0", "devices_free_after_s": 2.0}]),
    ("device_taints", "test_a_no_execute_taint_evicts_the_pods_using_the_device", "passed", 4.0,
     [{"device": "gpu-node-2/gpu-3", "evicted_after_s": 1.5}]),
]


def _junit(tests) -> str:
    cases = []
    for module, name, outcome, secs, _ in tests:
        body = ""
        if outcome == "failed":
            body = '<failure message="assert 3 == 4">Traceback: assert 3 == 4</failure>'
        elif outcome == "skipped":
            body = '<skipped type="pytest.skip" message="Kubernetes v1.31 serves no DeviceTaintRule API">skip</skipped>'
        cases.append(f'<testcase classname={quoteattr("suites.test_" + module)} name={quoteattr(name)} time="{secs}">{body}</testcase>')
    fails = sum(t[2] == "failed" for t in tests)
    skips = sum(t[2] == "skipped" for t in tests)
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">'
            f'<testsuite name="pytest" errors="0" failures="{fails}" skipped="{skips}" tests="{len(tests)}" time="9.9" '
            f'timestamp="2026-11-29T20:00:00" hostname="ci">{"".join(cases)}</testsuite></testsuites>')


def make_run(
    run_dir: Path,
    *,
    k8s: str = "v1.37.2",
    gates: list[str] | None = None,
    tests=None,
    contention_scale: float | None = 1.0,
    taint_versions: tuple[str, ...] = ("v1beta2",),
    complete: bool = True,
    freed_by_preemption: bool = False,
) -> Path:
    """Write a run directory; ``contention_scale`` multiplies every recorded wait (None: no contention)."""
    tests = DEFAULT_TESTS if tests is None else tests
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "junit.xml").write_text(_junit(tests))
    with open(run_dir / "evidence.jsonl", "w") as f:
        for module, name, outcome, secs, records in tests:
            f.write(json.dumps({"test": f"suites/test_{module}.py::{name}", "outcome": outcome, "duration_s": secs,
                                "records": [{"t": time.time(), **r} for r in records]}) + "\n")
    gates = GATES_137 if gates is None else gates
    (run_dir / "fingerprint.json").write_text(json.dumps({
        "provider": "local", "harness_version": "0.1.0", "command": ["dra-harness", "run"],
        "kubernetes": {"gitVersion": k8s, "goVersion": "go1.26.8"},
        "feature_gates": {"status": "read", "enabled": gates, "disabled": [], "stages": {}, "components": {"kube-apiserver": {}}},
        "resource_api": {"preferred": "v1", "versions": ["v1", *taint_versions], "resources": {},
                         "device_taint_rules": list(taint_versions)},
        "device_classes": [{"name": "gpu.example.com", "selectors": ["device.driver == 'gpu.example.com'"]}],
        "inventory": {"gpu.example.com": {"devices": 8, "partitions_published": False, "nodes": {
            "gpu-node-0": {"devices": 8, "models": {"LATEST-GPU-MODEL": 8}, "memory": {"80Gi": 8}, "driver_versions": ["1.0.0"]}}}},
        "drivers": [{"name": "gpu.example.com", "published_versions": ["1.0.0"], "build": "v0.4.0"}],
    }))
    (run_dir / "run.json").write_text(json.dumps({
        "run_id": run_dir.name, "command": ["dra-harness", "run"], "started": time.time() - 60, "finished": time.time(),
        "complete": complete, "exit_code": 0 if complete else None,
    }))
    if contention_scale is not None:
        out = run_dir / "contention"
        out.mkdir(exist_ok=True)
        png = _png()
        for src in sorted((DATA / "contention").glob("*.json")):
            data = json.loads(src.read_text())
            for t in data["tiers"]:
                t["wait_s"] = {k: v * contention_scale for k, v in t["wait_s"].items()}
                t["verdict"] = "meets" if t["wait_s"]["p95"] <= t["tolerable_wait_s"] else "misses"
            if data.get("preemption_probe"):
                data["preemption_probe"]["freed_by_preemption"] = freed_by_preemption
            (out / src.name).write_text(json.dumps(data))
            for plot in data["plots"].values():
                (out / plot).write_bytes(png)
    mark(run_dir, finished=complete)
    return run_dir


def mark(run_dir: Path, finished: bool = True) -> None:
    """The run marker as a run leaves it (claimed, its files recorded), unless the directory already carries one
    (``start_run`` claimed it): ``dra-harness report`` renders only a directory a run marked."""
    if not (run_dir / rundir.MARKER).exists():
        (run_dir / rundir.MARKER).write_text(json.dumps({"run_id": run_dir.name, "finished": finished,
                                                         "files": rundir.layout_files(run_dir)}))


@cache
def _png() -> bytes:
    return durations([{"concern": "contention", "seconds": 1.0}]) or b""


def copy_contention_fixture(run_dir: Path) -> None:
    shutil.copytree(DATA / "contention", run_dir / "contention", dirs_exist_ok=True)
