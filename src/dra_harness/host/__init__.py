"""This machine's plumbing that every provider shares: processes we start and own, and private runtime directories.

Why a package of its own: the embedded cluster started these, but kind's engine and the pytest plugin
need them too; kept inside one provider they made the others import it. They depend only on the
shared leaves (errors, lifetime).
"""
