"""The kind provider: DRA-enabled kind clusters with the example driver (configs and manifests in ``data/kind/``)."""
