"""Topology-aware co-placement: simulated GPUs under PCIe roots and NVLink domains, and the checks on them."""
