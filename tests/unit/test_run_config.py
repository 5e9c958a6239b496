"""The typed run configuration and the option table cannot drift apart."""

from __future__ import annotations

import dataclasses

import pytest

from dra_harness.options import BY_DEST, OPTIONS, RunConfig


def test_every_option_is_one_attribute_with_the_same_default():
    attrs = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    assert list(attrs) == [o.dest for o in OPTIONS]
    for option in OPTIONS:
        expected = False if option.is_flag else option.default
        assert attrs[option.dest] == expected, option.flag


def test_none_takes_the_default_and_an_unknown_name_is_refused():
    config = RunConfig.of({"nodes": None, "cluster_name": "c1", "lease_namespace": None})
    assert (config.nodes, config.cluster_name, config.lease_namespace) == (4, "c1", "default")
    with pytest.raises(ValueError, match="not run options: cluster_nmae"):
        RunConfig.of({"cluster_nmae": "typo"})
    assert BY_DEST["cluster_name"].flag == "--cluster-name"
