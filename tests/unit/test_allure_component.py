"""The Allure command line's install: checksum-pinned, atomic, cached; a bad download is one line and leaves nothing.

The archive is a local stand-in served from a ``file://`` URL (no network): the same
layout as Maven Central's zip, ``allure-<version>/bin/allure`` with its executable bit.
"""

from __future__ import annotations

import hashlib
import stat
import zipfile

import pytest

from dra_harness.components import allure
from dra_harness.components.prereqs import PrereqError
from dra_harness.errors import BuildError

VERSION = "9.9.9"


@pytest.fixture
def archive(tmp_path, monkeypatch):
    monkeypatch.setenv("DRA_HARNESS_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "allure.zip"
    with zipfile.ZipFile(path, "w") as z:
        script = zipfile.ZipInfo(f"allure-{VERSION}/bin/allure")
        script.external_attr = (stat.S_IFREG | 0o755) << 16
        z.writestr(script, "#!/bin/sh\necho fake allure \"$@\"\n")
        z.writestr(f"allure-{VERSION}/lib/allure.jar", b"jar")
    return path


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_install_is_unpacked_executable_and_then_cached(archive):
    first = allure.install(VERSION, _sha(archive), archive.as_uri())
    assert not first.cached and first.home == allure.home(VERSION)
    assert first.binary.stat().st_mode & 0o111 and (first.home / "lib" / "allure.jar").read_bytes() == b"jar"
    again = allure.install(VERSION, "not consulted when cached", archive.as_uri() + ".gone")
    assert again.cached and again.binary == first.binary


def test_a_download_that_does_not_match_the_pinned_checksum_is_refused_and_leaves_nothing(archive):
    with pytest.raises(PrereqError, match=r"not the pinned 0{64}: refusing to install it") as e:
        allure.install(VERSION, "0" * 64, archive.as_uri())
    assert "\n" not in str(e.value)
    assert not allure.is_installed(VERSION)
    assert not list(allure.home(VERSION).parent.glob(".installing-*")), "a staging directory was left behind"


def test_an_unreachable_download_is_one_line_naming_the_url(archive):
    url = archive.with_name("missing.zip").as_uri()
    with pytest.raises(PrereqError, match=f"downloading the Allure command line from {url} failed") as e:
        allure.install(VERSION, _sha(archive), url)
    assert "\n" not in str(e.value) and not allure.is_installed(VERSION)


def test_an_archive_without_the_launcher_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("DRA_HARNESS_CACHE", str(tmp_path / "cache"))
    odd = tmp_path / "odd.zip"
    with zipfile.ZipFile(odd, "w") as z:
        z.writestr("something-else/README", "hi")
    with pytest.raises(PrereqError, match=f"has no allure-{VERSION}/bin/allure"):
        allure.install(VERSION, _sha(odd), odd.as_uri())


def test_a_failed_generate_names_the_results_and_ends_with_the_tools_output(archive, tmp_path, monkeypatch):
    monkeypatch.setattr(allure, "ensure_java", lambda: "/usr/bin/java")
    installed = allure.install(VERSION, _sha(archive), archive.as_uri())
    # The stand-in prints and exits 0 but writes no index.html: that is a failure too.
    with pytest.raises(BuildError, match=r"failed \(exit 0\), no .*index\.html:\nfake allure generate --clean --single-file"):
        allure.generate(tmp_path / "results", tmp_path / "out", installed)


def test_the_pinned_release_is_an_allure_2_with_single_file_reports():
    major, minor, _ = (int(x) for x in allure.ALLURE_VERSION.split("."))
    assert major == 2 and minor >= 24  # --single-file arrived in 2.24
    assert len(allure.ALLURE_SHA256) == 64 and allure.MAVEN_URL.startswith("https://repo1.maven.org/")
