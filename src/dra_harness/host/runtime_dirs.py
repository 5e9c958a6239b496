"""Private short directories in /tmp for a cluster's unix sockets and real nodes, and safe fixed paths.

Why: unix socket paths end at 107 bytes, so the plugins' and real nodes' sockets cannot
live in the state directory (``~/.cache/...``); they live in /tmp, which every local user
can write. A name there that can be predicted (say, a hash of the state directory) and is
reused with ``exist_ok`` lets another user create it first, or a symlink in its place, and
have root put sockets, CDI specs and container state where that user chooses. So each
cluster gets a fresh :func:`tempfile.mkdtemp` directory (random name, mode 0700, owner
checked), recorded in ``cluster.json`` and in a marker inside it that names the cluster's
state directory: ``down`` and ``down --all`` find it by the record or the marker, never by
its name, and only ever trust a directory that is ours and private.

Where a fixed name is unavoidable (the lock files the processes of one test run share),
:func:`open_private_file` refuses, in one line, a path that is not a plain file of ours.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from dra_harness.errors import Refused

#: Not ``$TMPDIR``: it may be long, and the socket paths below the directory may not be.
SHORT_TMP = Path("/tmp")
PREFIX = "drh-"
#: Inside each runtime directory: the state directory of the cluster it belongs to.
MARKER = ".dra-harness-state"


class UnsafePath(Refused):
    """A path the harness would write as its user is not private to that user (one line)."""


def check_private(path: Path) -> None:
    """Raise :class:`UnsafePath` unless ``path`` is a directory (not a link) of ours that no one else may enter."""
    try:
        st = os.lstat(path)
    except OSError as e:
        raise UnsafePath(f"{path}: {e.strerror}; refusing to use it") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{path} is not a directory (a link or a file); refusing to use it")
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise UnsafePath(
            f"{path} is owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):o}, "
            f"not private to uid {os.geteuid()} (0700); refusing to use it"
        )


def create(state_dir: Path) -> Path:
    """A fresh private directory for the cluster whose state lives in ``state_dir``."""
    path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=SHORT_TMP))
    check_private(path)  # mkdtemp promises it; checked because everything below trusts it
    (path / MARKER).write_text(str(state_dir))
    return path


def _marked() -> list[tuple[Path, Path]]:
    """``(runtime dir, state dir it names)`` for every private runtime directory of ours."""
    found = []
    for path in sorted(SHORT_TMP.glob(PREFIX + "*")):
        try:
            check_private(path)
            found.append((path, Path((path / MARKER).read_text())))
        except (UnsafePath, OSError):
            continue  # another user's, or not one of ours
    return found


def owned_by(state_dir: Path) -> list[Path]:
    """The runtime directories of the cluster whose state lives in ``state_dir``."""
    return [path for path, owner in _marked() if owner == state_dir]


def orphans(clusters_root: Path) -> list[str]:
    """Names of clusters under ``clusters_root`` whose state is gone but whose runtime directory is not."""
    return sorted({owner.name for _, owner in _marked() if owner.parent == clusters_root and not owner.exists()})


def open_private_file(path: Path, mode: int = 0o600) -> int:
    """Open (creating it if need be) a fixed-name file in a shared directory; refuse a link or another user's file.

    Returns the file descriptor. ``O_NOFOLLOW`` keeps a planted symlink from redirecting
    the write; the owner check keeps a file another user created first from being shared.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePath(f"{path} is a symbolic link; refusing to use it") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise UnsafePath(f"{path} exists and is not a plain file of uid {os.geteuid()} (owner {st.st_uid}); refusing to use it")
    return fd
