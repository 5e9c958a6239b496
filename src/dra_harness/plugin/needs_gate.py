"""The preflight in a test session, and the gate that keeps a check from judging what it cannot test.

The first process of a run that opens the cluster gathers the preflight's facts
(:mod:`dra_harness.checks.preflight`) and shares them through the run's private lock
directory, so xdist workers ask the cluster once between them; the run directory gets
``preflight.json`` for the report. The plugin's ``cluster`` fixture gathers them under a shared
lock (the run's, and other runs' Lease): another run's drain must not become this run's facts. A check marked ``requires(...)`` whose need the facts do
not meet raises :class:`~dra_harness.errors.NotEstablished` before anything is created, and
the plugin reports it as "not established" with the missing fact.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from pathlib import Path

import pytest

from dra_harness.checks import needs as needs_mod
from dra_harness.checks import preflight as preflight_mod
from dra_harness.errors import NotEstablished
from dra_harness.host import runtime_dirs
from dra_harness.providers.handle import ClusterHandle
from dra_harness.report.files import write_json
from dra_harness.plugin.stash import run_config

_FACTS = pytest.StashKey[preflight_mod.Facts]()
log = logging.getLogger(__name__)


def preflight_facts(config: pytest.Config, handle: ClusterHandle, lock: Path) -> preflight_mod.Facts:
    """The run's facts: this process's copy, the copy another process of the run wrote, or gathered now."""
    if _FACTS in config.stash:
        return config.stash[_FACTS]
    shared = lock.with_suffix(".json")
    with os.fdopen(runtime_dirs.open_private_file(lock), "r+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            if shared.is_file():
                facts = preflight_mod.Facts.from_json(json.loads(shared.read_text()))
            else:
                facts = preflight_mod.collect(handle, run_config(config).lease_namespace)
                write_json(shared, facts.to_json())
                if report_dir := run_config(config).report_dir:
                    write_json(Path(report_dir) / preflight_mod.FILE, facts.to_json())
                log.info("preflight: %d nodes, %.1fs, errors: %s", len(facts.nodes), facts.seconds, facts.errors or "none")
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
    config.stash[_FACTS] = facts
    return facts


@pytest.fixture(scope="session")
def preflight(request: pytest.FixtureRequest, cluster: ClusterHandle) -> preflight_mod.Facts:
    """What this cluster lets us test; a test reads free capacity here (gathered when ``cluster`` opened it)."""
    return request.config.stash[_FACTS]


@pytest.fixture(autouse=True)
def _requirements(request: pytest.FixtureRequest) -> None:
    """A check whose ``requires`` need is missing is not established, with the fact, before it creates anything."""
    wanted = [n for m in request.node.iter_markers("requires") for n in m.args]
    # Every check on the cluster needs a device of its driver, but the inventory's comparisons with the expected
    # hardware (the ``baseline`` fixture), which judge a pool that publishes nothing, and contention on simulated nodes
    # of its own (``topology``); the rest cannot judge anything there.
    if "cluster" in request.fixturenames and not {"baseline", "topology"} & set(request.fixturenames):
        wanted = [needs_mod.any_device, *wanted]
    if not wanted:
        return
    why = needs_mod.unmet(request.getfixturevalue("preflight"), wanted)
    if why:
        raise NotEstablished(why)
