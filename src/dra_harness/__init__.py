"""dra-harness: evidence of how a Kubernetes cluster's Dynamic Resource Allocation behaves.

Layered from the bottom: ``kube`` (API access, waits, builders), ``components`` (Go builds),
``providers`` (where the cluster comes from), ``checks``, ``report``/``contention``,
``plugin`` (the pytest11 entry point) and ``cli``; the suites ship in ``suites/`` (the
checkout's ``suites/`` links there). See docs/layout.md.
"""

__version__ = "0.1.0"
