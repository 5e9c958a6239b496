"""The user's inputs, checked before anything is built, started or written: the same checks for `run` and for pytest.

Why one place: a bad file found after a cluster was built and started costs minutes
and ends as a test error deep in a session's output; found first, it is one line naming
the file and nothing exists yet. ``dra-harness run`` calls :func:`check` before it
builds a binary or writes the run directory, and prints the error as it is; the pytest
plugin calls it from ``pytest_configure`` and raises it as a ``pytest.UsageError``,
which pytest prints as one ``ERROR:`` line.
"""

from __future__ import annotations

import os
from pathlib import Path

from dra_harness.providers.hardware import HardwareFileError, load_hardware
from dra_harness.kube.client import KubeconfigError, connect
from dra_harness.kube.rest import ApiError, Unreachable
from dra_harness.providers.profiles import ProfileError, by_name, detect


class InputError(ValueError):
    """An option whose value is wrong before any file is read (a path of the wrong kind); one line."""


#: Everything :func:`check` raises for bad input; anything else is a bug in the harness.
ERRORS = (InputError, HardwareFileError, KubeconfigError, ProfileError, Unreachable, ApiError)


def check(provider: str, kubeconfig: str | None, context: str | None, driver: str | None,
          expected_hardware: str | None, report_dir: str | None) -> None:
    """Raise one of :data:`ERRORS` for the first input that cannot work; reach the cluster only when it exists already."""
    if report_dir and Path(report_dir).exists() and not Path(report_dir).is_dir():
        raise InputError(f"--report-dir {report_dir}: is a file, not a directory")
    if expected_hardware:
        load_hardware(expected_hardware)
    if provider == "existing":
        if not (kubeconfig or os.environ.get("KUBECONFIG")):
            raise InputError("--cluster=existing needs --kubeconfig (or KUBECONFIG)")
        kube = connect(kubeconfig, context)  # without --kubeconfig: every file KUBECONFIG lists
        kube.request("GET", "/version", timeout=10)
        by_name(driver) if driver else detect(kube)
    elif driver:
        by_name(driver)


def one_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [e.__class__.__name__])[0]
