"""The run's typed options in pytest's ``config.stash``, for the plugin's modules and the suites alike.

Why a module of its own: the plugin's helpers (simulated nodes, the needs gate) and the suites read
the run's options, and importing them from the plugin's entry point would tie them to it.
"""

from __future__ import annotations

import pytest

from dra_harness.options import RunConfig

#: The run's options, typed, built once from pytest's at configure time in every process of the run.
RUN_CONFIG = pytest.StashKey[RunConfig]()


def run_config(config: pytest.Config) -> RunConfig:
    """The run's options as typed attributes."""
    return config.stash[RUN_CONFIG]
