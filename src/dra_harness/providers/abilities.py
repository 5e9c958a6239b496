"""What a run's provider lets the suites do, as they ask it through the cluster handle.

Why a protocol apart from :class:`~dra_harness.providers.base.Provider`: a provider makes the handle
(:meth:`Provider.open`) and the handle names its provider back (``cluster.provider.controls_driver``).
Typed by the class, the two modules would import each other; the handle names this protocol instead,
which every provider meets, so :mod:`.base` imports :mod:`.handle` and nothing imports back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from dra_harness.kube.rest import Kube

#: What a provider reports about the cluster for the run's fingerprint: API access, the
#: components' /metrics it can read, the driver build it knows, and extra facts.
FingerprintSources = tuple[Kube, dict[str, Callable[[], str]], str | None, dict[str, Any]]


class ProviderAbilities(Protocol):
    """The abilities and facts of :class:`~dra_harness.providers.base.Provider` a suite may ask for."""

    @property
    def name(self) -> str: ...

    @property
    def controls_driver(self) -> bool: ...

    @property
    def harness_operated(self) -> bool: ...

    @property
    def simulates_nodes(self) -> bool: ...

    @property
    def workload_image(self) -> str | None: ...

    @property
    def nvml_probe_image(self) -> str | None: ...

    @property
    def outlives_run(self) -> bool: ...

    def gpu_settings_applied(self, node: str) -> list[str] | None: ...

    def fingerprint_sources(self) -> FingerprintSources | str: ...

    def stop_driver(self, node: str, kill: bool) -> None: ...

    def start_driver(self, node: str) -> None: ...

    def configure_driver(self, node: str, config: str) -> None: ...

    def start_driver_webhook(self, namespace: str, run_id: str) -> str: ...

    def stop_driver_webhook(self, name: str) -> None: ...

    def driver_log(self, node: str, lines: int) -> str: ...

    def driver_running(self, node: str) -> bool | None: ...

    def cdi_dir(self, node: str) -> Path | None: ...
