"""Running docker, kind, helm and friends: one-line errors, the line of their output that matters.

Why a module of its own: the engine, the image builders and the cluster steps all shell
out to the same tools, and a user must see the tool's own complaint ("ERROR: ...")
in one line, not a traceback or a screen of progress output.
"""

from __future__ import annotations

import logging
import re
import subprocess

from dra_harness.errors import ClusterError

log = logging.getLogger(__name__)


class KindError(ClusterError):
    """A prerequisite is missing or a kind step failed; the message is one line."""


def key_line(text: str) -> str:
    """The line of a tool's output that says what went wrong."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    # Docker and kind put the useful part last ("ERROR: ..."), after progress lines.
    errors = [ln for ln in lines if re.match(r"(?i)^(error|fatal|failed|e: )", ln)]
    return (errors or lines or ["no output"])[-1][:300]


def run_bytes(argv: list[str], what: str, timeout: float = 600, stdin: bytes | None = None) -> bytes:
    log.debug("%s: %s", what, " ".join(argv[:4]))
    try:
        proc = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise KindError(f"{what}: `{' '.join(argv[:3])}` did not finish in {timeout:.0f}s") from e
    except OSError as e:
        raise KindError(f"{what}: cannot run {argv[0]}: {e.strerror}") from e
    if proc.returncode != 0:
        raise KindError(f"{what} failed: {key_line(proc.stderr.decode(errors='replace') or proc.stdout.decode(errors='replace'))}")
    return proc.stdout


def run(argv: list[str], what: str, timeout: float = 600, stdin: bytes | None = None) -> str:
    return run_bytes(argv, what, timeout, stdin).decode(errors="replace")


def image_present(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


def image_label(image: str, label: str) -> str | None:
    """A label of a local Docker image, None when the image or the label is absent."""
    proc = subprocess.run(["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{label}"}}}}', image],
                          capture_output=True, text=True)
    value = proc.stdout.strip()
    return value if proc.returncode == 0 and value and value != "<no value>" else None
