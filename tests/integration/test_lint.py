"""``dra-harness lint`` against a real API server: the guide's selector refused and fixed, the fix's devices listed.

Negative controls: a claim naming a class that does not exist, a selector with an attribute
typo and a count no node can hold are accepted by the API server; lint warns about each and
says why it can never be allocated.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
LINT = ROOT / "fixtures" / "lint"


def _lint(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dra_harness.cli", "lint", *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


def test_the_guides_selector_is_refused_with_the_servers_message_and_the_compareto_fix(small_cluster):
    out = _lint(str(LINT / "guide-64gi.yaml"), "--name", small_cluster.name)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "found no matching overload for '_>=_' applied to '(kubernetes.Quantity, kubernetes.Quantity)'" in out.stdout
    assert 'fix: device.capacity["gpu.example.com"].memory.compareTo(quantity("64Gi")) >= 0' in out.stdout, out.stdout
    assert "1 rejected" in out.stdout.splitlines()[-1]


def test_the_corrected_file_passes_on_a_cluster_lint_starts_itself_and_lists_the_matching_devices():
    out = _lint(str(LINT / "guide-64gi-fixed.yaml"), "--k8s-version", "1.37.2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "info: " in out.stdout and "request gpu: matches 16 devices on 2 nodes: gpu-node-0/gpu-0" in out.stdout, out.stdout
    assert out.stdout.splitlines()[-1] == "lint against embedded cluster, Kubernetes 1.37.2: 0 rejected, 0 warnings"


def test_what_the_server_accepts_but_can_never_be_allocated_is_a_warning_with_the_reason(small_cluster, tmp_path):
    text = (LINT / "guide-64gi-fixed.yaml").read_text()
    never = tmp_path / "never.yaml"
    never.write_text("\n---\n".join([
        text.split("---")[0].replace("large-gpu", "no-class").replace("deviceClassName: gpu.example.com", "deviceClassName: gpu.exmaple.com"),
        text.split("---")[0].replace("large-gpu", "typo").replace('.memory.compareTo', '.memroy.compareTo'),
        text.split("---")[0].replace("large-gpu", "too-many").replace("deviceClassName: gpu.example.com",
                                                                       "deviceClassName: gpu.example.com\n            count: 3"),
    ]))
    out = _lint(str(never), "--name", small_cluster.name)
    assert out.returncode == 0, out.stdout + out.stderr  # accepted by the server: warnings, not rejections
    lines = out.stdout
    assert "no-class request gpu: DeviceClass 'gpu.exmaple.com' exists neither on the target nor in the files" in lines, lines
    assert "typo request gpu: matches no device: selector" in lines and "did you mean gpu.example.com/memory?" in lines, lines
    assert "too-many request gpu: asks for 3 devices on one node; at most 2 match on any node" in lines, lines
    assert lines.splitlines()[-1].endswith("0 rejected, 3 warnings")


def test_against_an_expected_hardware_file_the_requests_match_the_planned_devices_not_the_clusters(small_cluster, tmp_path):
    planned = tmp_path / "planned.yaml"
    planned.write_text("driver: gpu.example.com\nnodes:\n  big-0: {devices: 4}\n  big-1: {devices: 4}\n  big-2: {devices: 4}\n"
                       "devices:\n  attributes: {model: LATEST-GPU-MODEL, driverVersion: 1.0.0}\n  capacity: {memory: 80Gi}\n")
    out = _lint(str(LINT / "guide-64gi-fixed.yaml"), "--name", small_cluster.name, "--expected-hardware", str(planned))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "request gpu: matches 12 devices on 3 nodes: big-0/gpu-0" in out.stdout, out.stdout
    # Negative control: planned GPUs with too little memory match nothing, and lint says so.
    planned.write_text(planned.read_text().replace("80Gi", "40Gi"))
    small = _lint(str(LINT / "guide-64gi-fixed.yaml"), "--name", small_cluster.name, "--expected-hardware", str(planned))
    assert "matches no device" in small.stdout and "of the 12 published" in small.stdout, small.stdout
    bad = _lint(str(LINT / "guide-64gi-fixed.yaml"), "--name", small_cluster.name, "--expected-hardware", str(tmp_path / "none.yaml"))
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "none.yaml" in bad.stderr, bad.stderr
