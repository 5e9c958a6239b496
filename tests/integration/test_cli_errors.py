"""Bad input ends in one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "dra_harness.cli"]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["cluster", "kubeconfig", "--name", "no-such-cluster"], "cluster 'no-such-cluster' is not up"),
        (["cluster", "status", "--name", "no-such-cluster"], "cluster 'no-such-cluster' is not up"),
        (["cluster", "up", "--k8s-version", "1.2.3"], "'1.2.3' is not one of"),
        (["cluster", "up", "--nodes", "0"], "0 is not in the range"),
        (["cluster", "up", "--helm-set", "a=b"], "the driver's Helm chart runs on kind"),
        (["cluster", "up", "--provider", "kind", "--helm-set", "gpuPartitions"], "--helm-set 'gpuPartitions': expected KEY=VALUE"),
        (["cluster", "up", "--provider", "kind", "--helm-values", "/nonexistent/values.yaml"],
         "--helm-values /nonexistent/values.yaml: not a readable YAML file"),
        (["cluster", "up", "--provider", "kind", "--install", "manifests", "--helm-set", "a=b"], "need --install helm or auto"),
        (["cluster", "up", "--provider", "kind", "--driver-config", "net"], "on kind, give the chart's values with --helm-set"),
        (["upgrade", "--from", "1.35.4", "--to", "1.37.2"], "one minor at a time"),
        (["upgrade", "--from", "1.36.3", "--to", "1.37.2", "--real-nodes", "0", "--inject", "container-restart"],
         "--inject container-restart needs a real node"),
        (["upgrade", "--from", "1.36.3", "--to", "1.37.2", "--inject", "typo"], "'typo' is not one of"),
        (["upgrade", "--from", "1.37.2"], "nothing to upgrade"),
        (["upgrade", "--from", "1.36.3", "--to", "1.37.2", "--real-nodes", "0", "--unsupported-skew"], "--unsupported-skew needs"),
        (["canary", "verify", "/nonexistent/canary-dir"], "no canary.json"),
        (["canary", "start", "--run-dir", "/tmp/x", "--kubeconfig", "/nonexistent/kubeconfig"], "/nonexistent/kubeconfig"),
    ],
)
def test_bad_cluster_commands_fail_in_one_line(args, expected):
    out = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert expected in out.stderr
    assert "Traceback" not in out.stderr


def test_an_unreadable_kubeconfig_fails_the_run_in_one_line(tmp_path):
    bad = tmp_path / "kubeconfig"
    bad.write_text("this: [is not a kubeconfig\n")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "suites/test_inventory.py", "--cluster=existing", f"--kubeconfig={bad}", "-q", "-p", "no:cacheprovider"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode != 0
    assert "kubeconfig" in out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr


def test_a_bad_hardware_file_names_the_field(tmp_path):
    hw = tmp_path / "hw.yaml"
    hw.write_text("driver: gpu.example.com\nnodes: {n1: {devices: many}}\n")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "suites/test_inventory.py", "--cluster=existing", f"--kubeconfig={tmp_path / 'missing'}",
         f"--expected-hardware={hw}", "-q", "-p", "no:cacheprovider"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode != 0
    assert "Traceback" not in out.stdout + out.stderr
    assert "nodes.n1.devices: must be an integer, not a string" in out.stdout + out.stderr


def test_an_unknown_kubernetes_version_fails_the_suites_in_one_line():
    out = subprocess.run([sys.executable, "-m", "pytest", "suites/test_inventory.py", "--k8s-version=1.2.3", "-q", "-p", "no:cacheprovider"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "argument --k8s-version: invalid choice: '1.2.3' (choose from '1.37.2'" in out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
