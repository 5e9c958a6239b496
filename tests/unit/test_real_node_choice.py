"""`--real-nodes`: asked for where impossible is a one-line error; by default it falls back with the reason."""

from __future__ import annotations

import pytest

from dra_harness.errors import InputError
from dra_harness.components import real_node_host as realnode


def test_default_falls_back_to_no_real_nodes_with_the_reason(monkeypatch):
    said = []
    monkeypatch.setattr(realnode, "unavailable_reason", lambda: "real nodes need root")
    assert realnode.choose_real_nodes(None, said.append) == 0
    assert said == ["no real nodes: real nodes need root"]


def test_asking_for_real_nodes_where_impossible_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(realnode, "unavailable_reason", lambda: "real nodes need root")
    with pytest.raises(realnode.RealNodeUnavailable, match="--real-nodes 2: real nodes need root"):
        realnode.choose_real_nodes(2, print)
    assert issubclass(realnode.RealNodeUnavailable, InputError)  # the CLI prints it without a traceback


def test_default_is_one_where_possible_and_zero_never_checks(monkeypatch):
    monkeypatch.setattr(realnode, "unavailable_reason", lambda: None)
    assert realnode.choose_real_nodes(None, print) == 1
    monkeypatch.setattr(realnode, "unavailable_reason", lambda: pytest.fail("checked"))
    assert realnode.choose_real_nodes(0, print) == 0
