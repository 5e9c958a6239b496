"""Cluster providers: where the cluster under test comes from, behind one protocol (:mod:`.base`).

The registry below is the one place that maps a ``--cluster`` name to a provider; everything
else asks the provider what it can do. Providers are found as pytest finds its plugins: through
the ``dra_harness.providers`` entry points (pyproject.toml), loaded late, so that importing one
provider never loads all and no module of the harness imports a provider's package by name.
"""

from __future__ import annotations

import functools
from importlib.metadata import entry_points

from dra_harness.errors import ClusterError, HarnessError
from dra_harness.options import PROVIDER_NAMES, RunConfig
from dra_harness.providers.base import Provider
from dra_harness.providers.local import LocalClusterApi

#: The entry-point group providers register under (``name = "module:Class"``).
GROUP = "dra_harness.providers"


@functools.cache  # the entry points are read once per process: the installed package does not change under it
def registry() -> dict[str, type[Provider]]:
    """``--cluster`` name -> provider class, in :data:`~dra_harness.options.PROVIDER_NAMES`' order."""
    found: dict[str, type[Provider]] = {}
    for point in entry_points(group=GROUP):
        provider = point.load()
        found[provider.name] = provider
    missing = [n for n in PROVIDER_NAMES if n not in found]
    if missing:  # an install that predates the entry points: the harness reinstalls when pyproject.toml changes
        raise HarnessError(f"providers {', '.join(missing)} are not registered under the entry points {GROUP!r}: "
                           "reinstall the package (./harness does it when pyproject.toml changes)")
    order = {n: i for i, n in enumerate(PROVIDER_NAMES)}  # a third party's provider after ours
    return {n: found[n] for n in sorted(found, key=lambda n: (order.get(n, len(order)), n))}


def create(config: RunConfig, run_id: str) -> Provider:
    """The provider ``config.cluster`` names (default: the embedded cluster)."""
    return registry()[config.cluster](config, run_id)


def open_cluster(name: str) -> LocalClusterApi:
    """The local cluster ``name`` (running or not: :meth:`LocalClusterApi.exists` says), from the provider
    registered to run clusters on this machine."""
    for provider in registry().values():
        cluster = provider.local_cluster(name)
        if cluster is not None:
            return cluster
    raise ClusterError("no installed provider runs clusters on this machine (entry points 'dra_harness.providers')")


def running(name: str) -> LocalClusterApi:
    """:func:`open_cluster`, refused with one line where nothing runs under ``name``."""
    cluster = open_cluster(name)
    if not cluster.exists():
        raise ClusterError(f"cluster {name!r} is not up")
    return cluster
