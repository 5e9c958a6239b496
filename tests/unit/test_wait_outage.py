"""A wait's timeout names an API server outage: its own, or one another wait saw shortly before."""

from __future__ import annotations

import time

from dra_harness.kube import rest, waits
from dra_harness.kube.waits import Outage


def _seen_outage(monkeypatch, ended_ago_s: float, lasted_s: float) -> None:
    monkeypatch.setattr(waits, "_last_outage", (time.monotonic() - ended_ago_s, lasted_s))


def test_a_wait_that_saw_no_outage_names_one_another_wait_saw_shortly_before(monkeypatch):
    _seen_outage(monkeypatch, ended_ago_s=30, lasted_s=4.2)
    text = Outage().describe()
    assert text.startswith("; the API server was away 4.2s until 30s before this") and "backing off" in text


def test_negative_control_an_outage_long_past_is_not_named(monkeypatch):
    _seen_outage(monkeypatch, ended_ago_s=waits.COMPONENTS_CATCH_UP_S + 5, lasted_s=4.2)
    assert Outage().describe() == ""
    monkeypatch.setattr(waits, "_last_outage", None)
    assert Outage().describe() == ""


def test_a_wait_that_lived_through_an_outage_records_it_for_the_waits_after(monkeypatch):
    monkeypatch.setattr(waits, "_last_outage", None)
    mine = Outage()
    mine.down(rest.Unreachable("connection refused"))
    time.sleep(0.02)
    mine.up()
    assert "unreachable for" in mine.describe()  # its own outage, as before
    assert waits._last_outage is not None and waits._last_outage[1] >= 0.02
    assert Outage().describe().startswith("; the API server was away")

