"""Cluster providers: where the cluster under test comes from, behind one protocol (:mod:`.base`).

The registry below is the one place that maps a ``--cluster`` name to a provider; everything
else asks the provider what it can do.
"""

from __future__ import annotations

from dra_harness.options import RunConfig
from dra_harness.providers.base import Provider


def registry() -> dict[str, type[Provider]]:
    """``--cluster`` name -> provider class (imported here, late, so that importing one provider never loads all)."""
    from dra_harness.providers.embedded.provider import EmbeddedProvider
    from dra_harness.providers.existing import ExistingProvider
    from dra_harness.providers.kind.session import KindProvider

    return {p.name: p for p in (EmbeddedProvider, ExistingProvider, KindProvider)}


def create(config: RunConfig, run_id: str) -> Provider:
    """The provider ``config.cluster`` names (default: the embedded cluster)."""
    return registry()[config.cluster](config, run_id)
