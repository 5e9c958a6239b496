"""Registers the harness's pytest plugin for the suites (suites/) and the project's tests (tests/)."""

pytest_plugins = ["dra_harness.pytest_plugin"]
