"""Logging for the command line: ``--log-level`` and ``-v`` on the top-level group.

Only the harness's own loggers (``dra_harness.*``) are configured, to stderr, one
compact line each: ``12:03:04.512 dra_harness.kube POST Pod ns/name -> 201 (9 ms)``.
Libraries' loggers (urllib3, kubernetes) stay quiet at every level.
"""

from __future__ import annotations

import logging
import sys

LEVELS = ("DEBUG", "INFO", "WARNING")
DEFAULT = "WARNING"


class _Stderr(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is at each line: rich's progress display (``cluster up``)
    redirects it, so log lines print above the spinner instead of through it."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self):  # the handler reads the stream attribute at each line
        return sys.stderr


def level_for(log_level: str | None, verbose: int) -> int | None:
    """The more talkative of ``--log-level`` and ``-v`` (INFO) / ``-vv`` (DEBUG); None when neither was given."""
    if log_level is None and not verbose:
        return None
    by_flag = {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    return min(by_flag, logging.getLevelName(log_level.upper()) if log_level else logging.WARNING)


def configure(level: int | None) -> None:
    """Send ``dra_harness.*`` records at ``level`` and above to stderr (idempotent).

    None (no flag) leaves logging as it is: Python's own last-resort handler still prints
    warnings, and a host that configured logging (pytest's ``--log-cli-level``) keeps its say."""
    if level is None:
        return
    logger = logging.getLogger("dra_harness")
    logger.setLevel(level)
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d %(name)s %(message)s", datefmt="%H:%M:%S"))
        logger.addHandler(handler)
