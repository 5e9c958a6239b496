"""The harness's scheduling throughput is scheduler_perf's statistic, replayed from watched times."""

from __future__ import annotations

import pytest

from dra_harness.bench.throughput import samples, summarise


def test_a_steady_ten_pods_a_second_samples_ten_each_interval_after_the_first():
    times = [0.05 + i * 0.1 for i in range(50)]  # 10/s from t=0 to t=5
    got = samples(times, start=0.0)
    # The first tick (t=1) only starts the count; ticks 2..4 record; the interval holding the last pod is not counted.
    assert got == pytest.approx([10.0, 10.0, 10.0])


def test_a_tick_with_nothing_new_is_folded_into_the_next_and_recorded_once_per_interval():
    times = [0.5, 1.5, 1.6, 3.5, 3.6, 3.7, 3.8, 5.2]
    # tick 1 starts (1 pod); tick 2: +2 -> 2/s; tick 3: nothing; tick 4: +4 over 2 s -> 2/s twice; tick 5: nothing; the last pod (5.2) is uncounted.
    assert samples(times, start=0.0) == pytest.approx([2.0, 2.0, 2.0])


def test_scheduling_faster_than_one_interval_has_no_throughput_like_upstream():
    assert samples([0.1, 0.2, 0.3], start=0.0) == []
    assert summarise([]) is None


def test_the_summary_uses_nearest_rank_percentiles_and_the_mean():
    s = summarise([float(v) for v in range(1, 101)])
    assert s is not None
    assert (s["Average"], s["Perc50"], s["Perc90"], s["Perc99"], s["samples"]) == (50.5, 50.0, 90.0, 99.0, 100)
