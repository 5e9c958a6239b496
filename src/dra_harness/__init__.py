"""dra-harness: evidence of how a Kubernetes cluster's Dynamic Resource Allocation behaves.

The package is the harness's core (cluster providers, typed clients, waits, builders);
the pytest suites that use it live in ``suites/`` at the repository root.
"""

__version__ = "0.1.0"
