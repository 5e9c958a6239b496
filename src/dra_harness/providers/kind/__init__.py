"""The kind provider: DRA-enabled kind clusters with the example driver (configs in ``kind/`` at the repo root)."""
