"""Reading a run directory's files: never through a link, never from a FIFO or a device, never past a cap.

A run directory is often not the one this machine's run wrote: it is unpacked from a CI
artifact or handed over for sign-off, and ``dra-harness report`` then reads every file in
it. So each file is opened without following a link (``O_NOFOLLOW``: a link to
``/etc/shadow`` or ``/dev/zero`` is refused, not read), without blocking (``O_NONBLOCK``:
a FIFO opens at once and is then refused, instead of waiting forever for a writer), and
checked with ``fstat`` on what was opened, so it is a regular file no larger than the cap
for its kind (a sparse 3 GiB file is refused by its size before a byte is read). Each
refusal is one line naming the file, what it is, and the cap: never a traceback.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from dra_harness import yamlfile
from dra_harness.errors import InputError

MiB = 2**20

#: The most a report reads of each kind of file, in bytes: far above what a run writes, far below what would take
#: the machine's memory. A record is one of the run's JSON files (run.json, fingerprint.json, design.json,
#: preflight.json, summary.json, the marker, a contention result, an Allure result); "file" is any other file of the
#: layout, read whole to redact it or to bundle it (an Allure attachment, a failure dump, a plot).
CAPS: dict[str, int] = {
    "record": yamlfile.MAX_BYTES,
    "evidence log": 256 * MiB,
    "allocation log": 64 * MiB,
    "JUnit report": 256 * MiB,
    "plot": 32 * MiB,
    "file": 256 * MiB,
}
#: The kind of the run's files whose cap is not a record's or a plain file's, by name: whoever reads them whole
#: (the redaction, the bundle) holds them to their own cap and names it.
KIND_OF = {"junit.xml": "JUnit report", "evidence.jsonl": "evidence log", "allocations.jsonl": "allocation log"}


class RunDirError(InputError):
    """Not a run directory, or one of its files is malformed (one line naming it, for the CLI)."""


def present(path: Path) -> bool:
    """Whether anything is at ``path``, a link or a FIFO included: those are there, to be refused when read."""
    return os.path.lexists(path)


def read_bytes(path: Path, kind: str | None = None, prefix: str | None = None) -> bytes:
    """The bytes of a regular file of the run, at most ``CAPS[kind]`` (by default its name's kind, else a file's);
    :class:`RunDirError` naming it otherwise."""
    kind = kind or KIND_OF.get(path.name, "file")
    name, cap = prefix or str(path), CAPS[kind]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if os.path.islink(path):  # ELOOP: O_NOFOLLOW met a link
            raise RunDirError(f"{name}: is a symbolic link (to {os.readlink(path)}): a run's files are never read through "
                              "a link") from None
        raise RunDirError(f"{name}: cannot read: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)  # of what was opened: no race with a file swapped in after a check by name
        if stat.S_ISDIR(st.st_mode):
            raise RunDirError(f"{name}: is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise RunDirError(f"{name}: is not a regular file (a FIFO, socket or device): a run writes none")
        if st.st_size > cap:
            raise RunDirError(f"{name}: is larger than {cap // MiB} MiB ({st.st_size // MiB} MiB), the cap on any {kind} "
                              "a report reads")
        data = f.read(cap + 1)  # a file that grows while it is read stops one byte past the cap
    if len(data) > cap:
        raise RunDirError(f"{name}: is larger than {cap // MiB} MiB, the cap on any {kind} a report reads")
    return data


def read_text(path: Path, kind: str | None = None, prefix: str | None = None) -> str:
    """A text file of the run (UTF-8), refused as :func:`read_bytes` refuses, or when binary or not UTF-8."""
    return yamlfile.decode_text(read_bytes(path, kind, prefix), RunDirError, prefix or str(path))


def load_json(path: Path, prefix: str | None = None, kind: str = "record") -> dict[str, Any]:
    """A JSON object from a file of the run, refused as :func:`read_text` refuses, or when it is not one."""
    return yamlfile.parse_json(read_text(path, kind, prefix), RunDirError, prefix or str(path))
