"""The floor bench splits each job's created -> Running into the hops between its watched stamps."""

from __future__ import annotations

import pytest

from dra_harness.bench.floor import HOPS, hops, rows


def _stamps(sent: float, *after: float | None) -> dict[str, float | None]:
    """Stamps of one job: each later stamp ``after`` seconds past the one before (None: never seen)."""
    keys = ["answered", "claim_created", "allocated", "scheduled", "running"]
    out: dict[str, float | None] = {"sent": sent}
    t: float | None = sent
    for key, step in zip(keys, after, strict=True):
        t = None if step is None or t is None else t + step
        out[key] = t
    return out


def test_each_hop_is_the_time_between_its_two_stamps_and_the_total_spans_them_all():
    got = hops([_stamps(100.0, 0.01, 0.02, 0.03, 0.005, 0.012)])
    assert [label for label, _, _ in HOPS] == list(got)
    assert [v[0] for v in got.values()] == pytest.approx([0.01, 0.02, 0.03, 0.005, 0.012, 0.077])


def test_a_job_whose_later_stamps_were_never_seen_counts_only_in_the_hops_it_completed():
    got = hops([_stamps(0.0, 0.01, 0.02, None, None, None), _stamps(1.0, 0.01, 0.02, 0.03, 0.01, 0.01)])
    counts = [len(v) for v in got.values()]
    assert counts == [2, 2, 1, 1, 1, 1]


def test_rows_give_milliseconds_p50_and_p95_per_mode_and_a_dash_where_nothing_was_measured():
    idle = hops([_stamps(0.0, 0.04, 0.01, 0.03, 0.005, 0.01)] * 3)
    warm = hops([_stamps(0.0, 0.01, 0.01, 0.03, 0.005, 0.01)] * 3)
    warm["KWOK marks the pod Running"] = []
    got = rows({"hops": {"idle": idle, "warm": warm},
                "wake_up": {"API server /version": {"idle": [0.014, 0.016], "warm": [0.001, 0.001]}}})
    assert got[0] == ("API server answers the pod create", "40.0 / 40.0", "10.0 / 10.0")
    assert got[4] == ("KWOK marks the pod Running", "10.0 / 10.0", "-")
    assert got[-1] == ("API server /version", "15.0 / 15.9", "1.0 / 1.0")
