"""The harness's own exceptions: what it expects to go wrong, as opposed to its bugs.

Every expected failure derives from :class:`HarnessError` and carries a one-line message
that names the input or the object at fault; the CLI and the plugin print exactly those
as one line. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every failure the harness expects and explains in one line."""


class LockTimeout(HarnessError):
    """Another run on the same cluster held what this run waited for, past the deadline."""


class InputError(HarnessError, ValueError):
    """A user input (file, flag, kubeconfig) that cannot work; the message names it."""
