"""Host paths the harness writes as root: private /tmp directories, refused look-alikes, every cgroup hierarchy."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dra_harness.host import runtime_dirs
from dra_harness.providers.embedded import hostplumbing

# This project's machine: cgroup v1 controllers, the named systemd hierarchy, and cgroup2 at unified.
HYBRID = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime shared:7 - cgroup cgroup rw,cpuset
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V2_ONLY = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def test_every_cgroup_hierarchy_the_host_mounts_is_found_unified_included():
    found = hostplumbing.hierarchies(HYBRID)
    assert found == [Path(f"/sys/fs/cgroup/{h}") for h in ("cpu", "cpuset", "systemd", "unified")]
    # A v2-only host has one hierarchy, not one per top-level cgroup below it.
    assert hostplumbing.hierarchies(V2_ONLY) == [Path("/sys/fs/cgroup")]


@pytest.fixture
def short_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(runtime_dirs, "SHORT_TMP", tmp_path)
    return tmp_path


def test_a_runtime_dir_is_fresh_private_and_found_by_its_marker_only(short_tmp, tmp_path):
    state = tmp_path / "clusters" / "c"
    a, b = runtime_dirs.create(state), runtime_dirs.create(state)
    assert a != b and a.parent == short_tmp and a.name.startswith(runtime_dirs.PREFIX)
    assert stat.S_IMODE(a.stat().st_mode) == 0o700 and a.stat().st_uid == os.geteuid()
    assert runtime_dirs.owned_by(state) == sorted([a, b])
    assert runtime_dirs.owned_by(tmp_path / "clusters" / "other") == []
    # State gone, directory left: `down --all` finds the cluster by name.
    assert runtime_dirs.orphans(tmp_path / "clusters") == ["c"]
    state.mkdir(parents=True)
    assert runtime_dirs.orphans(tmp_path / "clusters") == []


def test_a_look_alike_that_is_not_private_is_refused_in_one_line_and_never_trusted(short_tmp, tmp_path):
    state = tmp_path / "clusters" / "c"
    planted = short_tmp / f"{runtime_dirs.PREFIX}planted"
    planted.mkdir(mode=0o777)
    os.chmod(planted, 0o777)  # what another user's directory would let anyone do
    (planted / runtime_dirs.MARKER).write_text(str(state))
    with pytest.raises(runtime_dirs.UnsafePath, match="not private") as e:
        runtime_dirs.check_private(planted)
    assert "\n" not in str(e.value)
    link = short_tmp / f"{runtime_dirs.PREFIX}link"
    link.symlink_to(runtime_dirs.create(state))
    with pytest.raises(runtime_dirs.UnsafePath, match="not a directory"):
        runtime_dirs.check_private(link)
    assert planted not in runtime_dirs.owned_by(state) and link not in runtime_dirs.owned_by(state)
    assert len(runtime_dirs.owned_by(state)) == 1  # the real one the link points at


def test_a_fixed_name_file_is_opened_only_if_it_is_a_plain_file_of_ours(tmp_path):
    path = tmp_path / "x.lock"
    os.close(runtime_dirs.open_private_file(path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    os.close(runtime_dirs.open_private_file(path))  # ours: reused
    target = tmp_path / "victim"
    target.write_text("keep")
    (tmp_path / "link.lock").symlink_to(target)
    with pytest.raises(runtime_dirs.UnsafePath, match="symbolic link"):
        runtime_dirs.open_private_file(tmp_path / "link.lock")
    assert target.read_text() == "keep"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_fixed_name_file_of_another_user_is_refused(tmp_path):
    path = tmp_path / "other.lock"
    path.write_text("")
    os.chown(path, 65534, 65534)
    with pytest.raises(runtime_dirs.UnsafePath, match="owner 65534"):
        runtime_dirs.open_private_file(path)
    other = tmp_path / f"{runtime_dirs.PREFIX}other"
    other.mkdir(mode=0o700)
    os.chown(other, 65534, 65534)
    with pytest.raises(runtime_dirs.UnsafePath, match="owned by uid 65534"):
        runtime_dirs.check_private(other)


def test_a_runs_lock_files_live_in_a_fresh_private_directory_not_at_a_predictable_name(tmp_path):
    """--run-id makes the run id predictable: a symlink planted at the old fixed lock name is never followed,
    because the locks live in a directory made by mkdtemp (0700) for this run alone."""
    run_id = f"t{os.getpid()}-lock"
    planted = Path(tempfile.gettempdir()) / f"dra-harness-{run_id}.cluster.lock"
    victim = tmp_path / "victim"
    victim.write_text("keep")
    planted.symlink_to(victim)
    conftest = tmp_path / "conftest.py"
    conftest.write_text("import os, stat\n"
                        "def pytest_collection_finish(session):\n"
                        "    d = os.environ['DRA_HARNESS_LOCK_DIR']\n"
                        "    print('LOCKDIR', d, oct(stat.S_IMODE(os.stat(d).st_mode)), os.stat(d).st_uid)\n")
    try:
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-s", "-p", "no:cacheprovider",
                              "-p", "no:locust", f"--run-id={run_id}", "-c", "/dev/null",
                              str(tmp_path)],
                             capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])
        line = next(x for x in out.stdout.splitlines() if x.startswith("LOCKDIR"))
        _, lock_dir, mode, uid = line.split()
        assert mode == "0o700" and int(uid) == os.geteuid() and Path(lock_dir).name.startswith(f"dra-harness-{run_id}-")
        assert lock_dir != str(planted) and victim.read_text() == "keep" and planted.is_symlink()
        assert not Path(lock_dir).exists(), "the run's lock directory was left behind"
    finally:
        planted.unlink()
