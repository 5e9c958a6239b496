"""The harness's own exceptions: what it expects to go wrong, as opposed to its bugs.

Every expected failure derives from :class:`HarnessError` and carries a one-line message
that names the input or the object at fault; the CLI and the plugin print exactly those
as one line. Anything else is a bug and keeps its traceback.

The bases say whose move it is:

- :class:`InputError`: the user's input is wrong (a flag, a file, a kubeconfig, a profile);
  fix the input and run again.
- :class:`ClusterError`: a cluster could not be brought up, reached as expected, or put
  back as it was (the host lacks what it needs, a process or node did not come up).
- :class:`BuildError`: a component could not be built; the message ends with the log's tail.
- :class:`KubeApiError`: the API server answered with an error, or did not answer.
- :class:`Refused`: the safety rules refuse the action; nothing was touched.
- :class:`CheckError`: a check could not be carried out to a verdict (a wait that ran out
  of time with its explanation, a probe that printed no report, a load generator that
  failed); inside a test it is the test's failure message.
- :class:`NotEstablished`: the cluster lacks what a check needs (an image it can pull, a right,
  free devices); the check is "not established" with that reason, never a FAIL of the product.
  :class:`LockTimeout` is one: another run on the same cluster held what this run waited for.


- :class:`LockLost`: a Lease this run held is no longer its own (taken over, deleted, or not
  renewed in time); what it guarded may have overlapped another run's section.

Each module keeps its own class where the name carries meaning (``KubeconfigError``,
``rest.NotFound``, ``DisruptionRefused``...) and derives it from one of these bases, so a
caller catches the specific class when it can act on it and a base when it only reports.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every failure the harness expects and explains in one line."""


class InputError(HarnessError):
    """The user's input cannot work: a flag, a file, a kubeconfig, a profile; the message names it."""


class ClusterError(HarnessError):
    """The cluster could not be brought up or is not in the expected state."""


class BuildError(HarnessError):
    """A build step failed; ``str()`` names the step and ends with the log's tail."""


class KubeApiError(HarnessError):
    """The API server answered with an error, or did not answer at all."""


class Refused(HarnessError):
    """The harness's safety rules refuse the action; nothing was touched."""


class CheckError(HarnessError):
    """A check could not be carried out to a verdict; the message says what was seen instead."""


class NotEstablished(HarnessError):
    """The harness could not test: the environment lacks what the check needs (the message names it).

    Kept apart from a check's failure on purpose: a FAIL says the product misbehaved, this says
    the cluster did not let us find out. Raised before anything is created where a preflight fact
    shows it, or as soon as a wait sees a state that cannot turn good (an image that cannot be pulled).
    """


class LockTimeout(NotEstablished):
    """Another run on the same cluster held what this run waited for, past the deadline (the message names it).

    Not established, never an error or a FAIL: the cluster was busy with another run, which says nothing of the
    product, nor of the harness."""


class LockLost(HarnessError):
    """A Lease this run held is no longer its own; the section it guarded must stop (and restore)."""


def one_line(e: BaseException) -> str:
    """An exception as the one line the CLI and plugin print: its message's first line, or its class."""
    return (str(e).strip().splitlines() or [e.__class__.__name__])[0]
