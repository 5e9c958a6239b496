"""Benchmarks: figures printed by ``dra-harness bench ...``, never pass/fail checks."""
