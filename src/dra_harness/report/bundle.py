"""The conformance bundle: one archive a vendor hands over, rebuilt byte for byte from the run directory.

Why an archive and not the run directory: the reader of a certification or a quote gets one file,
checks it has not changed in transit (``sha256sum -c SHA256SUMS`` inside it) and finds, per
requirement, the verdict *and* what it rests on — the checks' outcomes, their messages, the objects
and figures each test recorded, where they ran — without our tool. Why reproducible: a bundle
that two people build from the same run must be the same bytes, or a checksum proves nothing;
so entries are sorted, owned by 0:0 with the run's finishing time, and gzip carries no timestamp.

Everything comes from ``summary.json`` as ``write_report`` just rendered it, so the bundle's
verdicts are the report's. Credentials were redacted from the run's files by that render.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
from pathlib import Path

from dra_harness import __version__, data
from dra_harness.conformance import check_id
from dra_harness.kube.types import Obj
from dra_harness.report import rundir
from dra_harness.report.files import RunDirError, atomic_write
from dra_harness.report.reading import KIND_OF, load_json, present, read_bytes

FILE = "conformance-bundle.tar.gz"
SUMS = "SHA256SUMS"
#: Run files copied as they are when the run has them (raw evidence behind the verdicts).
COPIED = ("junit.xml", "fingerprint.json", "preflight.json", "run.json", "evidence.jsonl", "allocations.jsonl", "summary.json")
FORMAT = "dra-harness.io/conformance-bundle/v1"


def _name(requirement: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", requirement)


def _verdict_file(row: Obj, results: list[Obj]) -> Obj:
    """A requirement's verdict with every result row of its checks (outcome, message, evidence, provenance)."""
    checks = {c["check"] for c in row["checks"]}
    behind = [{k: r.get(k) for k in ("nodeid", "outcome", "message", "seconds", "evidence", "provenance", "failure_dump")}
              for r in results if check_id(r["nodeid"]) in checks]
    return {**row, "results": behind}


def contents(run_dir: Path) -> dict[str, bytes]:
    """Archive path -> bytes, everything but the checksums file (which covers these)."""
    summary_path = run_dir / "summary.json"
    if not present(summary_path):
        raise RunDirError(f"{run_dir}: no summary.json to bundle (render the run first)")
    summary: Obj = load_json(summary_path)
    section = summary.get("conformance")
    if not section or not section.get("rows"):
        raise RunDirError(f"{summary_path}: no conformance section (written by dra-harness before 0.1's conformance report?)")
    files: dict[str, bytes] = {}
    for name in COPIED:
        if present(run_dir / name):
            files[f"run/{name}"] = read_bytes(run_dir / name, KIND_OF.get(name, "record"))
    for dump in sorted((run_dir / "failures").glob("*.json")) if (run_dir / "failures").is_dir() else []:
        files[f"run/failures/{dump.name}"] = read_bytes(dump)
    for row in section["rows"]:
        files[f"verdicts/{_name(row['id'])}.json"] = _dump(_verdict_file(row, summary.get("results") or []))
    files["conformance.json"] = _dump({
        "format": FORMAT, "run_id": summary.get("run_id"), "verdict": summary.get("verdict"),
        "counts": section.get("counts"), "gaps": section.get("gaps"),
        "requirements": [{k: r.get(k) for k in ("id", "framework", "kar", "title", "level", "since", "source", "state", "reason",
                                                  "provenance", "drivers")} for r in section["rows"]],
    })
    files["mapping/conformance.yaml"] = data.path("conformance.yaml").read_bytes()
    files["MANIFEST.json"] = _dump({
        "format": FORMAT, "harness_version": summary.get("harness_version", __version__), "bundled_by": __version__,
        "run_id": summary.get("run_id"), "command": summary.get("command"), "started": summary.get("started"),
        "finished": summary.get("finished"), "complete": summary.get("complete"),
        "provenance": summary.get("provenance"), "fingerprint": "run/fingerprint.json" if "run/fingerprint.json" in files else None,
        "files": sorted(files),
    })
    return files


def _dump(obj: Obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode()


def sums(files: dict[str, bytes]) -> bytes:
    """``sha256sum`` format, sorted by path: ``sha256sum -c SHA256SUMS`` in the unpacked bundle checks it."""
    return "".join(f"{hashlib.sha256(b).hexdigest()}  {p}\n" for p, b in sorted(files.items())).encode()


def archive(files: dict[str, bytes], mtime: int) -> bytes:
    """A gzip'd tar of ``files`` plus SHA256SUMS, the same bytes for the same input."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, body in sorted({**files, SUMS: sums(files)}.items()):
            info = tarfile.TarInfo(f"conformance-bundle/{path}")
            info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = len(body), mtime, 0o644, 0, 0, "", ""
            tar.addfile(info, io.BytesIO(body))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def write(run_dir: Path, out: Path | None = None) -> Path:
    """Write the bundle (default ``<run_dir>/conformance-bundle.tar.gz``); returns its path."""
    files = contents(run_dir)
    summary = json.loads(files["run/summary.json"])
    target = out or run_dir / FILE
    try:
        atomic_write(target, archive(files, int(summary.get("finished") or summary.get("started") or 0)))
    except OSError as e:
        raise RunDirError(f"{target}: cannot write the bundle: {e.strerror or e}") from None
    if target.resolve().parent == run_dir.resolve():
        rundir.record(run_dir, [target])  # the run's own file: a later run in this directory may replace it
    return target


def verify(path: Path) -> dict[str, str]:
    """Check a bundle's files against its SHA256SUMS: {} when every file matches, else path -> problem."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            found = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    except (OSError, tarfile.TarError) as e:
        raise RunDirError(f"{path}: not a readable bundle ({e})") from None
    listed = {}
    for line in found.pop(SUMS, b"").decode().splitlines():
        digest, sep, name = line.partition("  ")
        if sep:
            listed[name] = digest
    problems = {p: "not in SHA256SUMS" for p in found if p not in listed}
    problems |= {p: "listed but missing" for p in listed if p not in found}
    problems |= {p: "checksum differs" for p, h in listed.items() if p in found and hashlib.sha256(found[p]).hexdigest() != h}
    return problems
