"""Retries of an operation that may fail for a moment, with tenacity.

Used where the harness asks the same question until the answer is yes or a deadline
passes: a process starting up (the API server's ``/readyz``, a kubelet's Node, containerd's
socket), an RBAC binding taking effect, a probe container's log. The attempt raises
:class:`NotYet` with what it saw; at the deadline the caller turns the last one into its
own explanatory error. Each retry is logged at DEBUG on the caller's logger.

Not here: watches and the waits built on them (:mod:`dra_harness.kube.waits` reconnects
with its own backoff and says in its timeout how long the API server was away), and the
loops docs/logs.md's "Retries" note lists.
"""

from __future__ import annotations

import logging
import ssl
import time
import urllib.request

from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_fixed


class NotYet(Exception):
    """An attempt whose answer is not the one waited for; its text says what it saw."""


def until(deadline: float, every: float, log: logging.Logger, what: str,
          retry_on: tuple[type[BaseException], ...] = (NotYet,)) -> Retrying:
    """Retry on ``retry_on`` every ``every`` seconds until ``deadline`` (``time.monotonic()``),
    then re-raise the last failure; anything else ends the retries at once."""

    def said(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        log.debug("%s: attempt %d: %s; again in %.1fs", what, state.attempt_number,
                  str(error).splitlines()[0] if error and str(error) else type(error).__name__, every)

    return Retrying(
        stop=lambda state: time.monotonic() >= deadline,
        wait=wait_fixed(every),
        retry=retry_if_exception_type(retry_on),
        reraise=True,
        before_sleep=said,
    )


def wait_answers(url: str, deadline: float, every: float, log: logging.Logger, what: str,
                 context: ssl.SSLContext | None = None) -> None:
    """Until ``url`` (a process's ``/readyz``) answers 200, or raise :class:`NotYet` with what it last said."""

    def ready() -> None:
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as r:
                if r.status != 200:
                    raise NotYet(f"{url} answered {r.status}")
        except OSError as e:
            raise NotYet(f"{what}: {e}") from None

    until(deadline, every, log, what)(ready)
