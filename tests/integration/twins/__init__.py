"""Staging twins drawn from a seed: cluster shapes nobody here chose, for runs that must give no false FAIL."""
