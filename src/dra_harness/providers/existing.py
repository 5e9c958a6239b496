"""``--cluster=existing``: a cluster the harness did not create, reached through a kubeconfig.

The run touches only what it creates (every object carries the run label) and what it
is told to (nodes labelled disruptable, with ``--allow-disruptive``), and deletes exactly
its own objects at the end; a watchdog does the same if the run is killed outright.
"""

from __future__ import annotations

import os
from pathlib import Path

from dra_harness.errors import InputError
from dra_harness.kube import rest
from dra_harness.kube.client import connect
from dra_harness.kube.rest import Kube
from dra_harness.providers import profiles
from dra_harness.providers.abilities import FingerprintSources
from dra_harness.providers.base import Provider
from dra_harness.providers.handle import ClusterHandle
from dra_harness.providers.hardware import Hardware, devices_by_node, load_hardware
from dra_harness.providers.profiles import DriverProfile


class ExistingProvider(Provider):
    name = "existing"

    def check_inputs(self) -> None:
        if self.config.cluster_name:
            raise InputError(f"--cluster-name {self.config.cluster_name}: no running embedded cluster of that name")
        if not (self.config.kubeconfig or os.environ.get("KUBECONFIG")):
            raise InputError("--cluster=existing needs --kubeconfig (or KUBECONFIG)")
        kube = self.connect()  # without --kubeconfig: every file KUBECONFIG lists
        kube.request("GET", "/version", timeout=10)
        if not self.config.driver:
            profiles.detect(kube)

    def connect(self) -> Kube:
        return connect(self.config.kubeconfig, self.config.context)  # None: every file KUBECONFIG lists

    def open(self, owner_pid: int) -> ClusterHandle:
        return open_kubeconfig(self, self.config.kubeconfig, self.config.context)

    def watchdog_target(self) -> tuple[str | None, str | None] | None:
        kubeconfig = self.config.kubeconfig
        # Without --kubeconfig the watchdog inherits KUBECONFIG (possibly a list) from our environment.
        return (str(Path(kubeconfig).resolve()) if kubeconfig else None, self.config.context)

    def fingerprint_sources(self) -> FingerprintSources:
        kube = self.connect()
        # Only the API server's /metrics is reachable through the API; others are "not read".
        return kube, {"kube-apiserver": lambda: kube.raw("/metrics", timeout=20)}, None, {}


def open_kubeconfig(provider: Provider, kubeconfig: str | None, context: str | None) -> ClusterHandle:
    """A handle on a cluster reached through a kubeconfig; the driver profile is detected unless named."""
    kube = connect(kubeconfig, context)
    driver, expected_file = provider.config.driver, provider.config.expected_hardware
    profile = profiles.by_name(driver) if driver else profiles.detect(kube)
    expected = load_hardware(expected_file) if expected_file else observed_hardware(kube, profile)
    path = Path(kubeconfig) if kubeconfig else Path("~/.kube/config")
    return ClusterHandle(provider, kube, path, provider.run_id, expected, profile,
                         expected_source="file" if expected_file else "observed")


def observed_hardware(kube: Kube, profile: DriverProfile) -> Hardware:
    """Without an expected-hardware file, the nodes that publish now define the baseline."""
    slices = kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={profile.driver}")
    nodes = {n: len(d) for n, d in devices_by_node(slices, profile.driver).items()}
    return Hardware(driver=profile.driver, device_class=profile.device_class, nodes=nodes)
