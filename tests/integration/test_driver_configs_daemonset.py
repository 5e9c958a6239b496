"""The driver-configuration suite with the real node's driver as a DaemonSet's pod (the DaemonSet form).

A team runs its driver as a DaemonSet and changes its settings through the pod template (Helm
values); the pod rolls. Here each configuration reaches the pod the same way: the template's
arguments change and the DaemonSet rolls the pod, and back. The suite's checks must pass as
they do with a restarted process, on the real node, and the template must end as it began.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dra_harness.kube import rest
from dra_harness.providers import driver_manifests
from dra_harness.providers.embedded import driver_daemonset
from dra_harness.components.real_node_host import unavailable_reason
from dra_harness.report.results import read_results

from .conftest import REAL_NODE

REASON = unavailable_reason()
pytestmark = [pytest.mark.cluster, pytest.mark.skipif(REASON is not None, reason=f"no real nodes here: {REASON}")]
ROOT = Path(__file__).resolve().parents[2]


def test_the_driver_configuration_suite_passes_with_the_real_nodes_driver_rolled_as_a_daemonset(real_cluster, tmp_path):
    kube = real_cluster.kube()
    st = real_cluster.state()
    driver_daemonset.install(real_cluster, kube, REAL_NODE, st.spec.driver_version, st.binaries["dra-example-kubeletplugin"])
    before = kube.get(rest.DAEMON_SETS, driver_daemonset.NAME, driver_manifests.NAMESPACE)["spec"]["template"]
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "suites/test_driver_configs.py", "--cluster=local", f"--cluster-name={real_cluster.name}",
         f"--report-dir={tmp_path}", f"--junitxml={tmp_path / 'junit.xml'}", "-q", "-rs", "-p", "no:cacheprovider"],
        capture_output=True, text=True, timeout=900, cwd=ROOT)
    results = read_results(tmp_path)
    verdicts = {r["test"]: r["outcome"] for r in results}
    # On 1.37 the cpu profile's check skips with its finding (the driver's 1.36 field is dropped); the rest pass.
    cpu = "test_a_numa_node_of_the_cpu_profile_is_shared_by_two_requests_and_its_cpus_are_charged_to_the_node"
    assert out.returncode == 0 and len(verdicts) == 7, f"{verdicts}\n{out.stdout[-3000:]}"
    assert {t: o for t, o in verdicts.items() if o != "passed"} in ({}, {cpu: "skipped"}), f"{verdicts}\n{out.stdout[-3000:]}"
    nodes = {r["test"]: {e.get("node") for e in r.get("evidence") or [] if e.get("node")} for r in results
             if r["outcome"] == "passed"}
    assert all(n == {REAL_NODE} for n in nodes.values()), f"every configuration on the DaemonSet's node: {nodes}"
    after = kube.get(rest.DAEMON_SETS, driver_daemonset.NAME, driver_manifests.NAMESPACE)["spec"]["template"]
    container = after["spec"]["containers"][0]
    assert not container.get("args"), f"the template kept the last configuration's arguments: {container.get('args')}"
    assert driver_daemonset.CONFIG_ANNOTATION not in (after["metadata"].get("annotations") or {}), after["metadata"]
    assert after["spec"]["containers"][0]["image"] == before["spec"]["containers"][0]["image"]
