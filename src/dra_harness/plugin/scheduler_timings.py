"""The scheduler's DRA timings over the whole run, into ``fingerprint.json``.

The fingerprint is taken before the suites, when kube-scheduler's DynamicResources plugin has
done nothing worth timing. So the session's controller reads the scheduler's metrics when the
session starts and again when it finishes — with the cluster still up, before the teardown —
and adds the plugin's mean time per call at each extension point to the fingerprint the run
wrote (``scheduler_dra``), where the report shows it and ``diff`` compares it between runs.
Registered only for a run that wrote a fingerprint (``dra-harness run``), never on xdist workers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from dra_harness.errors import HarnessError
from dra_harness.kube.types import Obj
from dra_harness.providers.base import Provider
from dra_harness.report import fingerprint
from dra_harness.report.files import write_json

log = logging.getLogger(__name__)


class SchedulerTimings:
    def __init__(self, provider: Provider, path: Path) -> None:
        self.provider = provider
        self.path = path
        self.finish: Callable[[], Obj] | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        try:
            sources = self.provider.fingerprint_sources()
        except HarnessError as e:
            log.info("no scheduler DRA timings: %s", e)
            return
        if not isinstance(sources, str):
            self.finish = fingerprint.scheduler_dra_timer(sources[1])

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.finish is None:
            return
        try:
            fp = json.loads(self.path.read_text())
        except (OSError, ValueError) as e:  # the run's own file, gone or cut: leave it as it is
            log.warning("scheduler DRA timings not recorded: %s: %s", self.path, e)
            return
        fp["scheduler_dra"] = self.finish()
        write_json(self.path, fp)
