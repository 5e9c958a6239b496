"""The project's own test session: where its time went, per test module and per worker, at the end of the log.

Why: ``--durations`` names the slowest tests, but the wall time of ``selftest`` is decided by how the
modules fall on its workers (``--dist loadfile``): a long module started late leaves the others
idle (docs/figures.md, "Where the project's test time goes"). The sums below show both: each
module's test time, and each worker's, whose difference is the idle time at the end.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

#: Below this much test time in all, the table says nothing worth its lines (a unit-test run).
QUIET_BELOW_S = 120.0
SHOWN = 15


class ModuleTimes:
    """Setup, call and teardown seconds per module and per worker, from every test report the session sees."""

    def __init__(self) -> None:
        self.modules: dict[str, float] = defaultdict(float)
        self.workers: dict[str, float] = defaultdict(float)
        self.ran_on: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = report.nodeid.split("::")[0]
        worker = getattr(getattr(report, "node", None), "gateway", None)
        name = getattr(worker, "id", "main")
        self.modules[module] += report.duration
        self.workers[name] += report.duration
        self.ran_on[module] = name

    def lines(self) -> list[str]:
        total = sum(self.modules.values())
        if total < QUIET_BELOW_S:
            return []
        top = sorted(self.modules.items(), key=lambda kv: -kv[1])[:SHOWN]
        out = [f"test time by module ({total:.0f} s in all; the {len(top)} longest, with the worker each ran on):"]
        out += [f"{seconds:8.1f}s  {self.ran_on[module]:5} {module}" for module, seconds in top]
        out.append("test time by worker: " + ", ".join(f"{w} {s:.0f} s" for w, s in sorted(self.workers.items())))
        return out


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or the only process) sees every worker's reports
        config.pluginmanager.register(ModuleTimes(), "dra-harness-module-times")


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    times = config.pluginmanager.get_plugin("dra-harness-module-times")
    for line in times.lines() if times else []:
        terminalreporter.write_line(line)
