"""``signoff.pdf``: the sign-off printed by headless Chromium, for filing with a quote.

Printing the HTML the reviewer already reads (rather than a second layout) keeps one
source of truth; the HTML's print stylesheet starts each concern and each section on a
new page and keeps table rows whole. Chromium runs in a private profile directory made
for the print and removed after it (never a fixed path), with no network access needed:
the HTML is self-contained. Printing never fails a run: a missing browser is one line.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from dra_harness.errors import BuildError
from dra_harness.lifetime import die_with_parent

FILE = "signoff.pdf"
TIMEOUT_S = 120


class PdfError(BuildError):
    """The PDF could not be printed (one line, naming why)."""


def browser() -> str | None:
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


def print_pdf(html: Path, pdf: Path | None = None) -> Path:
    """Print ``html`` to ``pdf`` (default: ``signoff.pdf`` beside it) and return its path."""
    exe = browser()
    if exe is None:
        raise PdfError("printing signoff.pdf needs Chromium: install the Debian package chromium (or run `dra-harness report "
                       "RUN_DIR --pdf` as root, which installs it)")
    pdf = pdf or html.with_name(FILE)
    # Chromium writes to whatever path it is given, a link planted there included: it prints into a folder made
    # for this print (new, private), beside the PDF so the rename stays on one file system.
    with tempfile.TemporaryDirectory(prefix="dra-harness-chromium-") as profile, \
            tempfile.TemporaryDirectory(prefix=f".{pdf.name}.", dir=pdf.parent) as printing:
        partial = Path(printing) / pdf.name
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
               "--no-pdf-header-footer", f"--print-to-pdf={partial}", html.resolve().as_uri()]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, preexec_fn=die_with_parent())
        except subprocess.TimeoutExpired as e:
            raise PdfError(f"Chromium did not print {html} within {TIMEOUT_S} s") from e
        if proc.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise PdfError(f"Chromium could not print {html}: exit {proc.returncode}: {tail[0][:200]}")
        partial.replace(pdf)
    return pdf
