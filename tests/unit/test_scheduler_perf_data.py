"""scheduler_perf's figure is read from the perf-dash file it writes, and only its SchedulingThroughput."""

from __future__ import annotations

import json

from dra_harness.bench.scheduler_perf import WORK, WORKLOADS, parse_data_items


def _item(metric: str, average: float) -> dict:
    return {"data": {"Average": average, "Perc50": average - 1, "Perc90": average + 2, "Perc95": average + 3,
                     "Perc99": average + 4}, "unit": "pods/s",
            "labels": {"Metric": metric, "Name": "SchedulingWithResourceClaimTemplate/2000pods_200nodes"}}


def test_the_scheduling_throughput_item_is_read_and_other_metrics_are_not(tmp_path):
    (tmp_path / "BenchmarkPerfScheduling_benchmark_2026-12-02T17:00:00Z.json").write_text(json.dumps(
        {"version": "v1", "dataItems": [_item("scheduler_framework_extension_point_duration_seconds", 0.5),
                                        _item("SchedulingThroughput", 41.3)]}))
    tp = parse_data_items(tmp_path)
    assert tp is not None and (tp["Average"], tp["Perc50"], tp["Perc99"]) == (41.3, 40.3, 45.3)


def test_no_file_or_no_throughput_item_reads_as_nothing_measured(tmp_path):
    assert parse_data_items(tmp_path) is None
    (tmp_path / "a.json").write_text(json.dumps({"version": "v1", "dataItems": [_item("Other", 1.0)]}))
    (tmp_path / "b.json").write_text("{not json")
    assert parse_data_items(tmp_path) is None


def test_every_workload_has_the_work_the_harness_repeats_and_it_fits_its_devices():
    assert set(WORK) == set(WORKLOADS)
    for nodes, per_node, init, pods in WORK.values():
        assert init + pods <= nodes * per_node


def test_each_ratio_is_the_harness_rate_over_scheduler_perfs_average_and_a_missing_rate_stays_missing():
    from dra_harness.bench.compare import ratios

    ref = {"Average": 25.0, "Perc50": 0, "Perc90": 0, "Perc95": 0, "Perc99": 0, "samples": 40}
    got = ratios(ref, {"scheduling_throughput": {**ref, "Average": 20.0}}, {"scheduling_throughput": None}, {"rate": 12.5})
    assert got == {"burst": 0.8, "half-full": None, "sustained": 0.5}
