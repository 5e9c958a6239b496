"""The run options go from the CLI to the test session as they were given: one table, both ways."""

from __future__ import annotations

import pytest

from dra_harness.options import BY_DEST, OPTIONS, to_pytest_args


def test_a_flag_left_off_is_not_passed_and_one_given_is():
    # A False flag once became "--dry-run": every disruptive test of `run` skipped as a dry run.
    assert to_pytest_args({"dry_run": False, "allow_disruptive": True, "keep_on_failure": False}) == ["--allow-disruptive"]


def test_defaults_and_unset_values_are_left_to_the_session():
    assert to_pytest_args({"nodes": 4, "gpus_per_node": 8, "tenant_label": "tenant", "kubeconfig": None}) == []


def test_values_that_differ_from_their_defaults_are_passed_with_their_flag():
    assert to_pytest_args({"cluster": "existing", "nodes": 2, "kubeconfig": "/k"}) == [
        "--cluster=existing", "--nodes=2", "--kubeconfig=/k"]


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.flag)
def test_every_value_the_cli_can_hold_reads_back_the_same_in_pytest(option, pytestconfig):
    """What `run` passes parses in the session to the value it had (pytest's own parser, our options)."""
    value = True if option.is_flag else option.choices[-1] if option.choices else (option.range or (1, 1))[1] if option.range \
        else ["x-value", "y=z:NoSchedule"] if option.multiple else "x-value"
    args = to_pytest_args({option.dest: value})
    parser = pytestconfig._parser  # the plugin's options are registered on this session's parser
    parsed = parser.parse_known_args(args)
    assert getattr(parsed, option.dest) == value
    assert BY_DEST[option.dest] is option
