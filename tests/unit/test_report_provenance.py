"""Provenance and readable evidence: the banner says where the checks ran, and no evidence reads as JSON."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

from dra_harness.report import provenance, readable, write_report
from dra_harness.report.provenance import KIND, REAL, SIMULATED
from tests.unit.report_runs import make_run

KWOK = {"metadata": {"name": "gpu-node-0", "annotations": {"kwok.x-k8s.io/node": "fake"}}}
KUBELET = {"metadata": {"name": "real-node-0"}, "spec": {}}
KIND_NODE = {"metadata": {"name": "dra-worker"}, "spec": {"providerID": "kind://docker/dra/dra-worker"}}


def _fp(by_node: dict[str, str], inventory: dict) -> dict:
    counts: dict[str, int] = {}
    for kind in by_node.values():
        counts[kind] = counts.get(kind, 0) + 1
    return {"nodes": {"counts": counts, "by_node": by_node}, "inventory": inventory,
            "drivers": [{"name": d, "build": "dra-example-kubeletplugin v0.4.0"} for d in inventory]}


def _inv(nodes: dict[str, int]) -> dict:
    return {"devices": sum(nodes.values()), "nodes": {n: {"devices": k} for n, k in nodes.items()}}


def _result(nodeid: str, outcome: str = "passed", evidence: list | None = None, suite: str = "allocation", message: str = "") -> dict:
    return {"nodeid": nodeid, "suite": suite, "outcome": outcome, "evidence": evidence or [], "message": message}


def _alloc(test: str, node: str, kind: str = "", driver: str = "gpu.example.com") -> dict:
    return {"test": test, "node": node, "node_kind": kind, "claims": [{"devices": [{"device": f"{driver}/{node}/gpu-0"}]}]}


def test_nodes_are_classified_by_the_kwok_annotation_and_the_kind_provider_id():
    assert [provenance.node_kind(n) for n in (KWOK, KUBELET, KIND_NODE)] == [SIMULATED, REAL, KIND]
    assert provenance.nodes([KWOK, KUBELET])["counts"] == {SIMULATED: 1, REAL: 1}


def test_drivers_are_named_by_what_produces_their_devices():
    assert [provenance.driver_source(d) for d in ("gpu.example.com", "topology.dra-harness.io", "gpu.nvidia.com")] == [
        provenance.EXAMPLE, provenance.HARNESS, provenance.VENDOR]


def test_simulated_devices_and_no_container_are_said_in_words():
    fp = _fp({"gpu-node-0": SIMULATED, "gpu-node-1": SIMULATED}, {"gpu.example.com": _inv({"gpu-node-0": 4, "gpu-node-1": 4})})
    results = [_result("a", evidence=[{"node": "gpu-node-0"}]),
               _result("b", "skipped", suite="parity", message="containers do not run on simulated (KWOK) nodes"),
               _result("c", "skipped", suite="gpu_visibility", message="the example profile's containers are not checked "
                                                                       "with NVML (real NVIDIA GPUs only)")]
    p = provenance.summarise(fp, results, [])
    assert p["sentence"] == ("on simulated devices: 8 from the example driver (gpu.example.com) on 2 simulated (KWOK) nodes; "
                             "no container ran (1 container-level checks skipped: no real node); "
                             "no GPU (1 GPU checks skipped: they need NVIDIA GPUs)")
    assert results[0]["provenance"]["text"] == "pods on 1 simulated (KWOK) node: no container ran"
    assert results[1]["provenance"]["text"] == "placement not recorded"
    assert not p["gpu"] and p["container_checks"] == 0


def test_a_check_on_a_real_node_counts_as_a_container_check_and_a_gpu_only_when_nvml_saw_one():
    fp = _fp({"gpu-node-0": SIMULATED, "real-node-0": REAL}, {"gpu.example.com": _inv({"gpu-node-0": 4, "real-node-0": 2})})
    results = [_result("a"), _result("v", suite="gpu_visibility", evidence=[{"node": "real-node-0", "visible": []}])]
    p = provenance.summarise(fp, results, [_alloc("a", "real-node-0", REAL)])
    assert "container checks on 1 real node (2 checks)" in p["sentence"] and p["sentence"].endswith("no GPU")
    assert "on 1 real kubelet node, 1 simulated (KWOK) node" in p["sentence"]
    assert results[0]["provenance"]["text"] == "pods on 1 real kubelet node; devices from the example driver"
    # Control: NVML in a container saw GPUs, so the banner stops saying "no GPU".
    results[1]["evidence"] = [{"node": "real-node-0", "visible": ["GPU-1234"]}]
    p = provenance.summarise(fp, results, [_alloc("a", "real-node-0", REAL)])
    assert p["gpu"] and p["sentence"].endswith("a GPU seen through NVML on real-node-0")


def test_vendor_devices_are_named_with_their_driver_and_a_node_missing_from_the_fingerprint_is_unknown():
    fp = _fp({"n1": REAL}, {"gpu.nvidia.com": _inv({"n1": 8})})
    results = [_result("a")]
    p = provenance.summarise(fp, results, [_alloc("a", "made-later", driver="gpu.nvidia.com")])
    assert p["sentence"].startswith("vendor devices: 8 from gpu.nvidia.com dra-example-kubeletplugin v0.4.0")
    assert results[0]["provenance"]["text"] == "pods on 1 node of unknown kind; devices from a vendor driver"


def test_times_read_in_the_unit_their_size_calls_for():
    assert [readable.duration(s) for s in (0.000123, 0.042, 1.5, 75, 900, 15970.8, None, "n/a")] == [
        "0.123 ms", "42 ms", "1.5 s", "75 s", "15 min", "4.44 h", "—", "n/a"]


def test_an_evidence_record_reads_as_labelled_phrases_and_a_list_of_like_objects_as_a_table():
    rec = {"t": 1.0, "node": "gpu-node-1", "evicted_after_s": 0.04, "devices": ["a/b/gpu-0", "a/b/gpu-1"],
           "condition": {"type": "DisruptionTarget", "reason": "DeletionByDeviceTaintManager"}, "ok": True, "gone": None}
    assert readable.sentence(rec) == ("node: gpu-node-1 · evicted after: 40 ms · devices: a/b/gpu-0, a/b/gpu-1 · "
                                      "condition: type DisruptionTarget, reason DeletionByDeviceTaintManager · ok: yes · gone: none")
    table = readable.items({"shares": [{"shareID": "x", "consumed": {"memory": "1Gi"}}, {"shareID": "y", "consumed": {}}]})
    assert table == [{"label": "shares", "table": {"columns": ["shareID", "consumed"], "rows": [["x", "memory 1Gi"], ["y", "none"]]}}]
    assert "{" not in readable.sentence({"m": {"kube-scheduler": {"moved": ["a"], "still": []}}, "j": '{"a": [1, 2]}'})
    assert len(readable.text(list(range(40))).split(", ")) == readable.MAX_ITEMS + 0 and "… and 28 more" in readable.text(list(range(40)))


class _Visible(HTMLParser):
    """Text of the evidence cells as a browser shows it by default: <details> bodies stay folded."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = 0
        self.folded = 0
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "td" and (self.cell or ("class", "evidence") in attrs):
            self.cell += 1
        if self.cell and tag == "pre":
            self.folded += 1

    def handle_endtag(self, tag):
        if self.cell and tag == "td":
            self.cell -= 1
        if self.cell and tag == "pre":
            self.folded -= 1

    def handle_data(self, data):
        if self.cell and not self.folded:
            self.text.append(data)


def visible_evidence(html: str) -> str:
    parser = _Visible()
    parser.feed(html)
    return " ".join(" ".join(parser.text).split())


RAW_JSON = re.compile(r'[{\[]\s*"')


def test_the_signoff_shows_provenance_in_the_banner_and_no_raw_json_in_the_evidence_cells(tmp_path):
    run = make_run(tmp_path / "run", tests=[
        ("device_taints", "test_a_no_execute_taint_evicts_the_pods_using_the_device", "passed", 4.0,
         [{"device": "gpu-node-2/gpu-3", "evicted_after_s": 0.04, "condition": {"type": "DisruptionTarget"}}]),
        ("driver_configs", "test_consumable_capacity", "passed", 2.0,
         [{"shares": [{"shareID": "a", "consumed": {"memory": "1Gi"}}, {"shareID": "b", "consumed": {"memory": "2Gi"}}]}]),
    ])
    html = write_report(run).read_text()
    assert 'id="provenance">On simulated devices: 8 from the example driver' in html
    shown = visible_evidence(html)
    assert "evicted after 40 ms" in shown and "shareID consumed a memory 1Gi b memory 2Gi" in shown
    assert not RAW_JSON.search(shown), shown
    summary = json.loads((run / "summary.json").read_text())
    assert summary["results"][0]["evidence_text"] == ["device: gpu-node-2/gpu-3 · evicted after: 40 ms · condition: type DisruptionTarget"]
    assert "**Where it ran:** on simulated devices" in (run / "signoff.md").read_text()
    # Control: the same scan finds the raw JSON the report used to show, so it can fail.
    assert RAW_JSON.search(visible_evidence('<td class="evidence"><code>{"device": "x"}</code></td>'))
