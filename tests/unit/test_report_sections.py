"""A report section is declared once and rendered in both formats; a broken contract fails loudly, not as an empty table."""

from __future__ import annotations

import pytest

from dra_harness.report import render, sections
from dra_harness.report.evidence import Evidence
from dra_harness.report.sections import Column, Section, SectionError
from dra_harness.report.summary import build_summary
from tests.unit.report_runs import make_run


class _Item:
    def __init__(self) -> None:
        self.user_properties: list[tuple[str, object]] = []


def _summary(tmp_path, records: list[dict]) -> dict:
    summary = build_summary(make_run(tmp_path / "run", contention_scale=None))
    summary["results"][0]["evidence"] = records
    return summary


@pytest.fixture
def fan_section():
    section = sections.register(Section(
        "fans", "Fan speed", (Column("fan", "fan", "code"), Column("rpm", "rpm"), Column("outcome", "outcome", "chip")),
        rows=lambda s: [{"fan": rec["fan"], "rpm": rec["rpm"], "outcome": r["outcome"]}
                        for r, rec in sections.records(s, section)], empty="Fans not checked in this run."))
    yield section
    sections.unregister("fans")


def test_one_section_definition_renders_the_same_rows_in_markdown_and_html(tmp_path, fan_section):
    summary = _summary(tmp_path, [{"section": "fans", "fan": "fan-0", "rpm": 5200}])
    md, html = render.markdown(summary), render.html(summary)
    assert "## Fan speed" in md and "| fan | rpm | outcome |\n|---|---|---|\n| `fan-0` | 5200 | passed |" in md
    assert '<h2 id="fans">Fan speed</h2>' in html and "<code>fan-0</code>" in html and "<td>5200</td>" in html


def test_a_section_with_nothing_recorded_says_so_in_both_formats(tmp_path, fan_section):
    summary = _summary(tmp_path, [])
    assert "Fans not checked in this run." in render.markdown(summary)
    assert "<p>Fans not checked in this run.</p>" in render.html(summary)


def test_the_operators_sections_are_registered_in_report_order():
    assert [s["section"].id for s in sections.rendered({"results": []})][:3] == ["device-health", "metrics", "governance"]


def test_negative_control_a_section_without_a_renderer_fails_when_declared():
    with pytest.raises(SectionError, match="'fans' has no renderer"):
        Section("fans", "Fan speed", (), rows=lambda s: [], empty="Fans not checked.")


def test_negative_control_a_record_for_a_section_nothing_renders_fails_at_the_call_site():
    with pytest.raises(SectionError, match="no report section 'fanz'"):
        Evidence(_Item()).record(section="fanz", fan="fan-0")


def test_negative_control_a_summary_naming_a_section_this_harness_cannot_render_fails_the_report(tmp_path):
    summary = _summary(tmp_path, [{"section": "fanz", "fan": "fan-0"}])
    with pytest.raises(SectionError, match="no report section 'fanz'"):
        render.markdown(summary)


def test_a_tagged_record_is_recorded_with_its_section(fan_section):
    item = _Item()
    Evidence(item).record(section="fans", fan="fan-1", rpm=1)
    (_, record), = item.user_properties
    assert record["section"] == "fans" and record["fan"] == "fan-1"


def test_the_records_the_suites_write_have_a_shape_their_section_renders():
    """One record of each kind, as suites/test_device_health.py, test_metrics.py and test_governance.py write them."""
    moves = {"moved": {"a": [0, 4]}, "still": {}, "absent": []}
    for section, record in [
        ("device-health", {"node": "n", "tainted": "gpu-1", "evicted_after_s": 0.04, "condition": None}),
        ("device-health", {"node": "n", "tainted": "gpu-0", "one_gpu_claim_got": ["gpu-1"]}),
        ("device-health", {"node": "n", "claim": "gpu", "health": {"gpu-0": "Unknown"}, "not_established": "why"}),
        ("metrics", {"kube-scheduler": moves, "kube-controller-manager": moves, "scheduler_dra_filter_mean_s": 0.0064}),
        ("metrics", {"node": "real-node-0", **moves}),
        ("governance", {"policy": "p", "allowed_class": "c", "refused": {}, "own_class": "created", "first_refusal": None}),
        ("governance", {"without_label": "refused", "with_label": "accepted"}),
        ("governance", {"service_account": "sa", "granted_beyond": [], "missing_needed": [], "slice_probe": {}, "findings": []}),
    ]:
        Evidence(_Item()).record(section=section, **record)  # type: ignore[arg-type]


def test_negative_control_a_record_with_a_misspelled_key_fails_at_the_call_site():
    with pytest.raises(SectionError, match=r"'device-health' with keys condition, evicted_after, node, tainted has none of its shapes: "
                                           r"TaintEvicts\(condition, evicted_after_s, node, tainted\)"):
        Evidence(_Item()).record(section="device-health", node="n", tainted="gpu-1", evicted_after=0.04, condition=None)  # type: ignore[arg-type]
    with pytest.raises(SectionError, match="'metrics' with keys kube-schedular"):
        Evidence(_Item()).record(section="metrics", **{"kube-schedular": {}})  # type: ignore[arg-type]


def test_negative_control_a_measurement_the_metrics_pattern_does_not_name_fails_at_the_call_site():
    """The metrics section takes further keys only as ``scheduler_dra_<point>_mean_s`` (its Shape's ``extra``)."""
    moves = {"moved": {"a": [0, 4]}, "still": {}, "absent": []}
    both = {"kube-scheduler": moves, "kube-controller-manager": moves}
    Evidence(_Item()).record(section="metrics", **both, scheduler_dra_prebind_mean_s=0.001)  # type: ignore[arg-type]
    with pytest.raises(SectionError, match="scheduler_dra_filter_p99_s"):
        Evidence(_Item()).record(section="metrics", **both, scheduler_dra_filter_p99_s=0.1)  # type: ignore[arg-type]
