"""Contention: mixed-priority GPU workloads under three pool designs (shared, reserved, pools).

kube-scheduler does not free a device a lower-priority pod holds for a higher-priority
one just because of priority (see the preemption probe), so a cluster's design has to
keep each workload class within the wait it tolerates. This package loads scenarios,
builds each design on the cluster, drives the arrivals with locust, records every job's
life from watches and turns that into per-tier waits, utilisation and verdicts.
"""
