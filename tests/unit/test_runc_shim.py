"""The runtime shim dockerd runs containers through: it drops what the host cannot grant, and nothing else.

It runs for real (bash, jq, prlimit) against bundles written here; ``runc`` is played by
``echo`` so the test sees the arguments it would have been given.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from dra_harness.providers.kind import engine

pytestmark = pytest.mark.skipif(shutil.which("jq") is None or shutil.which("prlimit") is None,
                                reason="the shim needs jq and prlimit (the harness installs jq with the engine)")


def _shim(bundle, *args):
    env = {**os.environ, "DRA_HARNESS_REAL_RUNC": "echo"}
    return subprocess.run([str(engine.SHIM), "--root", "/x", *args], capture_output=True, text=True, env=env, check=True)


def _bundle(tmp_path, caps, rlimits):
    (tmp_path / "config.json").write_text(json.dumps({"process": {
        "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
        "rlimits": rlimits}}))
    return tmp_path


def _hard_nofile() -> int:
    out = subprocess.run(["prlimit", "--raw", "--noheadings", "-o", "HARD", "--nofile"], capture_output=True, text=True).stdout
    return int(out.strip())


def test_capabilities_outside_our_bounding_set_are_dropped_and_runc_gets_the_same_arguments(tmp_path):
    missing = engine.missing_capabilities()
    if not missing:
        pytest.skip("this host's bounding set is complete (the no-op case is tested below)")
    bundle = _bundle(tmp_path, ["CAP_CHOWN", *missing, "CAP_SYS_ADMIN"], [])
    out = _shim(bundle, "create", "--bundle", str(bundle), "c1")
    assert out.stdout.split() == ["--root", "/x", "create", "--bundle", str(bundle), "c1"]
    caps = json.loads((bundle / "config.json").read_text())["process"]["capabilities"]
    assert caps["bounding"] == ["CAP_CHOWN", "CAP_SYS_ADMIN"] == caps["effective"]


def test_an_rlimit_above_our_hard_limit_is_lowered_to_it(tmp_path):
    hard = _hard_nofile()
    bundle = _bundle(tmp_path, ["CAP_CHOWN"], [{"type": "RLIMIT_NOFILE", "hard": hard * 4, "soft": hard * 4},
                                               {"type": "RLIMIT_CORE", "hard": 5, "soft": 5}])
    _shim(bundle, "create", f"--bundle={bundle}", "c1")
    limits = json.loads((bundle / "config.json").read_text())["process"]["rlimits"]
    assert limits == [{"type": "RLIMIT_NOFILE", "hard": hard, "soft": hard}, {"type": "RLIMIT_CORE", "hard": 5, "soft": 5}]


def test_a_bundle_the_host_can_run_is_not_rewritten(tmp_path):
    bundle = _bundle(tmp_path, ["CAP_CHOWN", "CAP_KILL"], [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}])
    (bundle / "config.json").write_text((bundle / "config.json").read_text() + "\n\n")  # a byte a rewrite would drop
    before = (bundle / "config.json").read_bytes()
    _shim(bundle, "create", "--bundle", str(bundle), "c1")
    assert (bundle / "config.json").read_bytes() == before


def test_commands_without_a_bundle_pass_straight_through(tmp_path):
    assert _shim(tmp_path, "delete", "--force", "c1").stdout.split() == ["--root", "/x", "delete", "--force", "c1"]


def test_an_exec_process_file_gets_the_same_treatment(tmp_path):
    """``docker exec --privileged`` (kind runs every node command so) hands runc a process file, not a bundle."""
    missing = engine.missing_capabilities()
    if not missing:
        pytest.skip("this host's bounding set is complete")
    process = tmp_path / "process.json"
    process.write_text(json.dumps({"args": ["cat"], "capabilities": {"bounding": ["CAP_KILL", *missing]}}))
    out = _shim(tmp_path, "exec", "--process", str(process), "--detach", "c1")
    assert out.stdout.split()[-1] == "c1"
    assert json.loads(process.read_text())["capabilities"] == {"bounding": ["CAP_KILL"]}
