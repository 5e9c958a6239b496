"""The user's inputs, checked before anything is built, started or written: the same checks for `run` and for pytest.

Why one place: a bad file found after a cluster was built and started costs minutes
and ends as a test error deep in a session's output; found first, it is one line naming
the file and nothing exists yet. ``dra-harness run`` calls :func:`check` before it
builds a binary or writes the run directory, and prints the error as it is; the pytest
plugin calls it from ``pytest_configure`` and raises it as a ``pytest.UsageError``,
which pytest prints as one ``ERROR:`` line.
"""

from __future__ import annotations

import re
from pathlib import Path

from dra_harness.errors import InputError, KubeApiError
from dra_harness.options import cluster_rules
from dra_harness.providers.hardware import load_hardware
from dra_harness.providers.base import Provider
from dra_harness.providers.lock import refuse_blind_runs
from dra_harness.providers.profiles import by_name
from dra_harness.providers.sweep import refuse_reused_run_id


#: Everything :func:`check` raises for bad input (a file, a flag, a kubeconfig, a profile: :class:`InputError`)
#: or for a cluster that does not answer as it should (:class:`KubeApiError`); anything else is a bug in the harness.
ERRORS = (InputError, KubeApiError)


def check(provider: Provider, report_dir: str | None) -> None:
    """Raise one of :data:`ERRORS` for the first input that cannot work; reach the cluster only when it exists already
    (then a run id that objects there carry already is refused: the run would adopt them and sweep them; and so is an
    identity that may not list Leases in every namespace: it would not see the runs it takes turns with)."""
    if report_dir and Path(report_dir).exists() and not Path(report_dir).is_dir():
        raise InputError(f"--report-dir {report_dir}: is a file, not a directory")
    if provider.config.expected_hardware:
        load_hardware(provider.config.expected_hardware)
    driver = provider.config.driver
    if driver:
        by_name(driver)
    daemonset = provider.config.driver_daemonset
    if daemonset and not re.fullmatch(r"[a-z0-9][-a-z0-9.]*/[a-z0-9][-a-z0-9.]*", daemonset):
        raise InputError(f"--driver-daemonset {daemonset!r}: expected NAMESPACE/NAME")
    selector = provider.config.kwok_node_selector
    if selector and not re.fullmatch(r"[A-Za-z0-9][-A-Za-z0-9_./]*=[-A-Za-z0-9_.]*", selector):
        raise InputError(f"--kwok-node-selector {selector!r}: expected KEY=VALUE (a node label)")
    if selector and not provider.config.kwok_image:
        raise InputError("--kwok-node-selector: only with --kwok-image (it places the KWOK Deployment's pod)")
    cluster_rules(provider.config)  # a bad toleration, label or profile file: one line, naming it
    provider.check_inputs()
    kube = provider.kube_before_run()
    if kube is not None:  # two runs of one id would share a lock identity and sweep each other's objects
        refuse_reused_run_id(kube, provider.run_id, provider.config.lease_namespace or "default")
        # Runs of another lease namespace are seen only through a list of leases across the cluster.
        refuse_blind_runs(kube, provider.config.lease_namespace or "default")


