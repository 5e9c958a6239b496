"""In-place upgrades of the embedded cluster, performed under live claims (``dra-harness upgrade``).

Why performed and not compared: the pre-upgrade gate (``diff``) compares two fresh clusters; what
breaks in practice happens during the upgrade itself, to claims allocated and containers prepared
under the old release. The embedded cluster runs every component as a process the harness owns,
so each can be swapped for the next release's binary in the order an operator would.
"""
