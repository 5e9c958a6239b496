"""Kubernetes vocabulary for the harness: typed clients, waits, builders, cleanup."""
