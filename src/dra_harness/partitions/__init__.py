"""Partitionable devices at scale: a MIG-style layout as shared counters, a request stream, and its checks."""
