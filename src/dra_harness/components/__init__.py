"""Cluster components built from Go modules: wrapper modules, build and binary cache.

Why build at all: our machines (and many CI runners) have no container engine and
may reach nothing but the Go module proxy, so every control-plane binary is compiled
from its published module, pinned by go.sum files committed in ``components/``.
"""
