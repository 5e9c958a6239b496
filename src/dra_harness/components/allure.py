"""The Allure 2 command line, for ``dra-harness report RUN_DIR --allure``: installed once, cached, pinned.

Why Maven Central and not the npm registry: the ``allure-commandline`` npm package is a
wrapper that ships this same zip inside it, so npm would add Node and npm as
prerequisites without adding anything; Maven Central serves the zip the Allure project
publishes, with a checksum next to it. The zip's SHA-256 is pinned below (checked
against the ``.sha1`` Maven Central publishes when it was pinned), so a changed or
truncated download is refused rather than run. Allure runs on Java (8 or newer): when
no ``java`` is on PATH the harness installs Debian's ``default-jre-headless`` (as root;
otherwise one line says what to install).

The unpacked tool lives under ``$DRA_HARNESS_CACHE/bin/allure/<version>/`` (default
``~/.cache/dra-harness``). It is downloaded and unpacked into a private temporary
directory beside it and renamed into place under a lock, so an interrupted install never
leaves a half-unpacked tool that looks cached, and two runs never install at once.

``--single-file`` (Allure 2.24 and later) writes one self-contained ``index.html`` that
a browser opens from ``file://``, without the web server ``allure open`` starts.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from dra_harness.components import prereqs
from dra_harness.components.build import cache_root, lock
from dra_harness.components.prereqs import PrereqError
from dra_harness.errors import BuildError

#: The newest Allure 2 on Maven Central (maven-metadata.xml, lastUpdated 2026-10-19).
ALLURE_VERSION = "2.34.1"
#: SHA-256 of allure-commandline-2.34.1.zip; its published .sha1 is e120a5b146882a4bef414f9a4aa546177b6f3427.
ALLURE_SHA256 = "6eb2e037604744d4ba1f9cad3676cf286974aca48f7839d9b2f7688e1efd79f2"
MAVEN_URL = "https://repo1.maven.org/maven2/io/qameta/allure/allure-commandline/{v}/allure-commandline-{v}.zip"
JAVA_PACKAGE = "default-jre-headless"
#: Seconds without a byte from Maven Central before the download is given up.
DOWNLOAD_TIMEOUT = 60
#: Seconds ``allure generate`` may take (a few seconds for a run's results on two cores).
GENERATE_TIMEOUT = 600


@dataclass(frozen=True)
class Installed:
    home: Path
    seconds: float
    cached: bool

    @property
    def binary(self) -> Path:
        return self.home / "bin" / "allure"


def home(version: str = ALLURE_VERSION) -> Path:
    return cache_root() / "bin" / "allure" / version


def is_installed(version: str = ALLURE_VERSION) -> bool:
    return (home(version) / "bin" / "allure").is_file()


def ensure_java() -> str:
    """The ``java`` Allure will run; Debian's default JRE is installed when there is none (root only)."""
    found = shutil.which("java")
    if found is None:
        prereqs.ensure([JAVA_PACKAGE], "the Allure command line (it runs on Java)")
        found = shutil.which("java")
    if found is None:
        raise PrereqError(f"the Allure command line needs Java: {JAVA_PACKAGE} is installed but no java is on PATH")
    return found


def install(version: str = ALLURE_VERSION, sha256: str = ALLURE_SHA256, url: str | None = None) -> Installed:
    """The Allure command line, downloaded and unpacked unless the cache already has it."""
    target = home(version)
    with lock(cache_root() / "locks" / f"allure-{version}.lock"):
        if is_installed(version):
            return Installed(target, 0.0, cached=True)
        started = time.monotonic()
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".installing-", dir=target.parent))
        try:
            archive = staging / "allure.zip"
            _download(url or MAVEN_URL.format(v=version), archive, sha256)
            unpacked = _unpack(archive, staging / "unpacked", f"allure-{version}")
            if target.exists():
                shutil.rmtree(target)
            unpacked.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return Installed(target, time.monotonic() - started, cached=False)


def _download(url: str, dest: Path, sha256: str) -> None:
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response, open(dest, "wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        raise PrereqError(f"downloading the Allure command line from {url} failed: {reason}") from None
    if digest.hexdigest() != sha256:
        raise PrereqError(f"{url} has SHA-256 {digest.hexdigest()}, not the pinned {sha256}: refusing to install it")


def _unpack(archive: Path, into: Path, top: str) -> Path:
    """Extract the zip (zipfile keeps every member inside ``into``), restoring the executable bits it records."""
    try:
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                path = Path(z.extract(info, into))
                mode = (info.external_attr >> 16) & 0o777
                if mode and not info.is_dir():
                    os.chmod(path, mode)
    except (zipfile.BadZipFile, OSError) as e:
        raise PrereqError(f"unpacking {archive.name} failed: {e}") from None
    unpacked = into / top
    if not (unpacked / "bin" / "allure").is_file():
        raise PrereqError(f"the Allure archive has no {top}/bin/allure")
    (unpacked / "bin" / "allure").chmod(0o755)
    return unpacked


def generate(results: Path, out: Path, installed: Installed | None = None) -> float:
    """``allure generate --clean --single-file RESULTS -o OUT``; the seconds it took."""
    ensure_java()
    tool = installed or install()
    argv = [str(tool.binary), "generate", "--clean", "--single-file", str(results), "-o", str(out)]
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=GENERATE_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise BuildError(f"allure generate {results} did not finish within {GENERATE_TIMEOUT}s") from None
    if proc.returncode != 0 or not (out / "index.html").is_file():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise BuildError(f"allure generate {results} failed (exit {proc.returncode}), no {out / 'index.html'}:\n{tail}")
    return time.monotonic() - started
