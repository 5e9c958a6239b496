"""Driver configurations by name, as ``cluster up --driver-config`` and ``cluster driver-config`` take them."""

from __future__ import annotations

import pytest

from dra_harness.errors import InputError
from dra_harness.providers.driver_configs import CONFIGS, combined


def test_one_name_is_its_configuration_and_none_is_the_default():
    assert combined(("partitions-4",)) is CONFIGS["partitions-4"]
    assert combined(()) is CONFIGS["default"]


def test_names_whose_flags_a_known_configuration_has_combine_into_it_in_any_order():
    assert combined(("multiple-allocations", "partitions-4")) is CONFIGS["multiple-allocations-partitions-4"]
    assert combined(("partitions-4", "multiple-allocations")) is CONFIGS["multiple-allocations-partitions-4"]


@pytest.mark.parametrize("names", [("multiple-allocations", "net"), ("device-status", "binding-conditions"), ("cpu", "net")])
def test_negative_control_names_that_do_not_combine_are_one_line_naming_what_does(names):
    with pytest.raises(InputError, match=r"do not combine; combinations known: multiple-allocations-partitions-4$") as e:
        combined(names)
    assert "\n" not in str(e.value)


def test_an_unknown_name_is_one_line_naming_the_known_ones():
    with pytest.raises(InputError, match=r"--driver-config: no driver configuration 'gpus'; known: default, "):
        combined(("gpus",))
