"""The run directory: which directory a run may write into, and which files in it are the run's own.

``--report-dir`` may name any directory, including one that holds someone's work, so
a run never deletes or overwrites a file it did not write. A run marks the directory
it writes into with ``.dra-harness-run`` (JSON: the run id, whether the run finished,
and the files it wrote, relative to the directory; no secret). It refuses a non-empty
directory without that marker, and, re-using a marked directory, removes only the
files the previous run recorded as its own. A run that did not finish (killed) has not
recorded every file its test session wrote, so its directory is refused rather than
guessed at. Every refusal happens before anything is written or deleted.

What a run owns is also bounded by its layout: the top-level files in
:data:`RUN_FILES` and whatever lies under :data:`RUN_DIRS`. A file the user puts beside
them (``notes.txt``) is never touched.

The marker is also what makes a directory a run's for ``dra-harness report DIR``, which
rewrites files in it: a run marks its directory before it writes anything (``dra-harness
run`` claims it; a pytest session run directly with ``--report-dir`` marks it), and a
directory without the marker, however much it looks like a run (a ``junit.xml`` of
someone's CI), is refused. A folder of the layout that is a link (``allure-results`` to
somewhere else) is refused too: everything the report reads and writes stays inside.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from dra_harness.report.files import RunDirError, write_json
from dra_harness.report.reading import load_json, present

MARKER = ".dra-harness-run"
#: The files a run writes at the top of its directory, and the folders it fills.
#: The two ``.jsonl`` files are appended to as tests end: being in the layout is what makes a new run start them empty.
RUN_FILES = ("run.json", "fingerprint.json", "preflight.json", "design.json", "junit.xml", "evidence.jsonl", "allocations.jsonl",
             "summary.json", "signoff.md", "signoff.html", "signoff.pdf", "conformance-bundle.tar.gz")
#: ``allure-report`` is written by ``dra-harness report --allure``, not by the run itself.
RUN_DIRS = ("allure-results", "allure-report", "failures", "contention", "upgrade")


def in_layout(rel: str) -> bool:
    """Whether a relative path is one a run writes (and so may own)."""
    parts = PurePosixPath(rel).parts
    if not parts or ".." in parts or PurePosixPath(rel).is_absolute():
        return False
    return (len(parts) == 1 and parts[0] in RUN_FILES) or (len(parts) > 1 and parts[0] in RUN_DIRS)


def layout_files(run_dir: Path) -> list[str]:
    """Every file (or link) present in the run layout, relative and sorted; the marker is not one."""
    found = [name for name in RUN_FILES if os.path.lexists(run_dir / name)]
    for top in RUN_DIRS:
        if os.path.islink(run_dir / top):
            continue  # os.walk would follow a linked top (never links below it): check_layout refuses it instead
        for folder, _dirs, files in os.walk(run_dir / top):
            found += [Path(folder, f).relative_to(run_dir).as_posix() for f in files]
    return sorted(found)


def check_layout(run_dir: Path) -> None:
    """RunDirError when a folder of the layout is a link or not a folder, or a file of it is a folder: what is read
    and written below them would then be somewhere else (a link's target), or fail half-way."""
    for top in RUN_DIRS:
        path = run_dir / top
        if os.path.islink(path):
            raise RunDirError(f"{path}: is a symbolic link (to {os.readlink(path)}): a run's folders are never read or "
                              "written through a link")
        if present(path) and not path.is_dir():
            raise RunDirError(f"{path}: is not a directory, where a run keeps a folder")
    for name in RUN_FILES:
        if not os.path.islink(run_dir / name) and (run_dir / name).is_dir():
            raise RunDirError(f"{run_dir / name}: is a directory, not a file (a run writes a file there)")


def read_marker(run_dir: Path) -> dict[str, Any] | None:
    """The marker's record, None when there is none; RunDirError when it is not one of ours."""
    path = run_dir / MARKER
    if not present(path):
        return None
    try:
        record = load_json(path)
    except RunDirError as e:
        raise RunDirError(f"{path} is not a dra-harness run marker ({str(e).removeprefix(f'{path}: ')})") from None
    if not (isinstance(record, dict) and isinstance(record.get("run_id"), str)
            and isinstance(record.get("files"), list) and all(isinstance(f, str) for f in record["files"])):
        raise RunDirError(f"{path} is not a dra-harness run marker (no run_id and files)")
    return record


def _previous_files(run_dir: Path) -> list[str]:
    """The files an earlier run in ``run_dir`` wrote; RunDirError when the directory is not safely ours."""
    record = read_marker(run_dir)
    if record is None:
        raise RunDirError(f"{run_dir} is not empty and has no {MARKER} marker: refusing to write a run into a "
                          "directory dra-harness did not create (choose an empty or new --report-dir)")
    run_id = record["run_id"]
    if not record.get("finished"):
        raise RunDirError(f"{run_dir} holds run {run_id}, which did not finish, so the files it wrote are not all "
                          "recorded: remove the directory or choose another --report-dir")
    recorded = record["files"]
    foreign = [f for f in recorded if not in_layout(f)]
    if foreign:
        raise RunDirError(f"{run_dir / MARKER} lists {foreign[0]}, which no run writes: refusing to delete it")
    unrecorded = sorted(set(layout_files(run_dir)) - set(recorded))
    if unrecorded:
        raise RunDirError(f"{run_dir / unrecorded[0]} was not written by run {run_id}: refusing to overwrite it")
    return recorded


def check(run_dir: Path) -> None:
    """Raise RunDirError if ``run_dir`` may not become a run's directory; changes nothing."""
    if os.path.lexists(run_dir) and not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is not a directory")
    if run_dir.is_dir() and any(run_dir.iterdir()):
        _previous_files(run_dir)
        check_layout(run_dir)


def default_root() -> Path:
    """Where runs go without ``--report-dir``: ``reports/out`` of the checkout, or of the working directory
    when the harness is an installed package."""
    from dra_harness.components.build import checkout_root

    return (checkout_root() or Path.cwd()) / "reports" / "out"


def claim(run_dir: Path, run_id: str) -> None:
    """Make ``run_dir`` this run's: create it, take an empty one, or re-use a marked one.

    Re-using, only the previous run's recorded files go (and the folders they leave
    empty), so no earlier result leaks into this run and no one else's file is lost.
    """
    check(run_dir)  # everything is checked before anything is deleted
    if run_dir.is_dir() and any(run_dir.iterdir()):
        previous = _previous_files(run_dir)
        for rel in previous:
            (run_dir / rel).unlink(missing_ok=True)
        _remove_empty_folders(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / MARKER, {"run_id": run_id, "finished": False, "files": []})


def _remove_empty_folders(run_dir: Path) -> None:
    for top in RUN_DIRS:
        for folder, _dirs, _files in sorted(os.walk(run_dir / top), key=lambda w: -len(w[0])):
            try:
                os.rmdir(folder)
            except OSError:
                pass  # not empty: something in it is not ours


def mark(run_dir: Path, run_id: str) -> None:
    """Mark ``run_dir`` as a run's unless it is (a pytest session run directly with ``--report-dir``, whose
    directory ``dra-harness report`` then renders); unlike :func:`claim`, nothing is checked or removed."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if read_marker(run_dir) is None:
        write_json(run_dir / MARKER, {"run_id": run_id, "finished": False, "files": []})


def record(run_dir: Path, written: Iterable[Path]) -> None:
    """Add files this process wrote to the marker (a marked directory only: a plain pytest one stays unmarked)."""
    marker = read_marker(run_dir)
    if marker is None:
        return
    rels = {Path(p).resolve().relative_to(run_dir.resolve()).as_posix() for p in written}
    marker["files"] = sorted(set(marker["files"]) | {r for r in rels if in_layout(r)})
    write_json(run_dir / MARKER, marker)


def seal(run_dir: Path) -> None:
    """At the end of the run: everything in the layout was written by this run (its test session included)."""
    marker = read_marker(run_dir)
    if marker is None:
        return
    marker["files"] = sorted(set(marker["files"]) | set(layout_files(run_dir)))
    marker["finished"] = True
    write_json(run_dir / MARKER, marker)
