"""What the suites check and how: inventory audits, sharing audits, scheduling diagnosis,
in-container probes, disruptions and the evidence saved when a test fails.

Checks sit above the providers (they get a :class:`~dra_harness.providers.handle.ClusterHandle`)
and below the pytest plugin; they never know which kind of cluster they run on, only what
the provider says it can do.
"""
