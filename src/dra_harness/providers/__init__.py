"""Cluster providers: where the cluster under test comes from, behind one protocol."""
