"""The typed run configuration and the option table cannot drift apart."""

from __future__ import annotations

import dataclasses

import pytest

from dra_harness.options import BY_DEST, OPTIONS, RunConfig


def test_every_option_is_one_attribute_with_the_same_default():
    attrs = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    assert list(attrs) == [o.dest for o in OPTIONS]
    for option in OPTIONS:
        expected = False if option.is_flag else () if option.multiple else option.default
        assert attrs[option.dest] == expected, option.flag


def test_none_takes_the_default_and_an_unknown_name_is_refused():
    config = RunConfig.of({"nodes": None, "cluster_name": "c1", "lease_namespace": None})
    assert (config.nodes, config.cluster_name, config.lease_namespace) == (4, "c1", "default")
    with pytest.raises(ValueError, match="not run options: cluster_nmae"):
        RunConfig.of({"cluster_nmae": "typo"})
    assert BY_DEST["cluster_name"].flag == "--cluster-name"


def test_lease_seconds_reaches_the_run_config_and_pytest_and_a_value_out_of_range_is_one_line(tmp_path):
    from click.testing import CliRunner

    from dra_harness.cli import main
    from dra_harness.options import LEASE_SECONDS, to_pytest_args

    assert RunConfig.of({"lease_seconds": 20}).lease_seconds == 20 and RunConfig.of({}).lease_seconds == LEASE_SECONDS
    assert to_pytest_args({"lease_seconds": 20}) == ["--lease-seconds=20"]
    assert to_pytest_args({"lease_seconds": LEASE_SECONDS}) == []  # the default is not passed on
    result = CliRunner().invoke(main, ["run", "--lease-seconds", "5", "--report-dir", str(tmp_path / "out")])
    assert result.exit_code == 2 and "--lease-seconds" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()
