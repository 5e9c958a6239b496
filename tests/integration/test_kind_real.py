"""``dra-harness run --cluster kind`` for real: Docker engine, kind, node image, Helm chart, every suite, nothing left.

Nothing here is a stand-in: the harness starts Debian's dockerd (root only) when no engine
runs, builds kind, Helm and the node image (cached by their inputs), creates the cluster,
installs the example driver with its own chart, runs every suite, writes the report and
deletes everything it made. The run happens once per module; each test reads one outcome.
Later integration modules (real nodes, the embedded cluster) run after this one on the
same machine, which is how CI shows that the kind flow leaves nothing that breaks them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from dra_harness.components import catalog
from dra_harness.providers.kind import engine, nodeimage

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the kind flow starts a Docker engine and builds images as root"),
    pytest.mark.skipif(shutil.which("go") is None, reason="kind and Helm are built from their Go modules"),
]
ROOT = Path(__file__).resolve().parents[2]
WORKERS = 2


def _docker(*args: str) -> list[str]:
    out = subprocess.run(["docker", *args], capture_output=True, text=True)
    return out.stdout.split() if out.returncode == 0 else []


def _host() -> dict[str, object]:
    """What the kind flow could leave on this host."""
    saved = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    return {
        "engine": engine.running(),
        "containers": _docker("ps", "-aq"),
        "networks": sorted(_docker("network", "ls", "--format", "{{.Name}}")),
        "volumes": _docker("volume", "ls", "-q"),
        "docker_chains": sorted(set(re.findall(r"^:(DOCKER\S*)", saved, re.M))),
        "links": sorted(ln for ln in os.listdir("/sys/class/net") if _dockers(ln)),
    }


def _dockers(link: str) -> bool:
    """Docker's bridges and the veths on them. Not every veth: the other test worker's embedded clusters with
    real nodes add and remove veths of their own (on their drah* bridges) while kind runs here."""
    if re.fullmatch(r"docker0|br-[0-9a-f]{12}", link):
        return True
    try:
        master = os.path.basename(os.readlink(f"/sys/class/net/{link}/master"))
    except OSError:  # no bridge (or gone meanwhile)
        return False
    return link.startswith("veth") and bool(re.fullmatch(r"docker0|br-[0-9a-f]{12}", master))


@pytest.fixture(scope="module")
def kind_run(tmp_path_factory):
    before = _host()
    report = tmp_path_factory.mktemp("kind-run")
    argv = [sys.executable, "-m", "dra_harness.cli", "run", "--cluster", "kind", "--nodes", str(WORKERS),
            "--report-dir", str(report)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    return proc, report, before, _host()


def test_the_run_on_kind_passes(kind_run):
    proc, report, _, _ = kind_run
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert (report / "junit.xml").is_file()


def test_the_fingerprint_shows_our_node_image_the_helm_install_and_slices_from_daemonset_pods(kind_run):
    _, report, _, _ = kind_run
    fp = json.loads((report / "fingerprint.json").read_text())
    kind = fp["kind"]
    assert kind["node_image"] == nodeimage.tag(catalog.DEFAULT_KUBERNETES_VERSION) and kind["node_image_built_here"] is True
    assert kind["driver_install"].startswith(f"helm v{catalog.HELM_VERSION}, chart dra-example-driver from sigs.k8s.io/dra-example-driver@")
    assert fp["kubernetes"]["gitVersion"] == f"v{catalog.DEFAULT_KUBERNETES_VERSION}"
    publishers = kind["publishers"]
    assert len(publishers) == WORKERS, publishers
    for p in publishers:
        assert p["daemonset"] == "dra-example-driver-kubeletplugin" and p["pod"], p
        assert p["devices"] == 8 and p["images"] == [kind["driver_image"]], p


def _cases(report: Path) -> dict[str, str]:
    """Test name -> passed | skipped | failed, from the run's junit."""
    out = {}
    for case in ET.parse(report / "junit.xml").getroot().iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        out[name] = "skipped" if case.find("skipped") is not None else (
            "failed" if case.find("failure") is not None or case.find("error") is not None else "passed")
    return out


def test_the_container_level_checks_ran_in_real_containers(kind_run):
    _, report, _, _ = kind_run
    cases = _cases(report)
    # The sharing suite's checks read what each container sees (GPU_DEVICE_* injected through CDI).
    in_container = {n: s for n, s in cases.items() if n.startswith("suites.test_sharing.") and "container" in n}
    assert len(in_container) >= 5, sorted(cases)
    assert all(s == "passed" for s in in_container.values()), in_container


def test_nothing_is_left_after_the_run(kind_run):
    _, _, before, after = kind_run
    assert after["containers"] == before["containers"]
    assert after["volumes"] == before["volumes"]
    assert after["networks"] == before["networks"]
    assert after["links"] == before["links"]
    if not before["engine"]:
        # The engine the run started is stopped and its iptables chains and links are gone.
        assert after["engine"] is False and after["docker_chains"] == before["docker_chains"]


@pytest.fixture
def engine_up():
    started = engine.ensure()
    yield
    if started:
        engine.stop()


def test_the_node_image_holds_every_image_the_cluster_runs_so_nothing_is_pulled(engine_up):
    """Read from the image's own containerd store; the expected list comes from the catalog, not from the image."""
    version = catalog.DEFAULT_KUBERNETES_VERSION
    expected = sorted([f"registry.k8s.io/{c}:v{version}" for c in
                       ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")]
                      + [f"registry.k8s.io/etcd:{catalog.ETCD_VERSION}-0", f"registry.k8s.io/coredns/coredns:v{catalog.COREDNS_VERSION}",
                         "registry.k8s.io/pause:3.10"])
    assert nodeimage.preloaded(nodeimage.tag(version)) == expected


def test_the_runtime_shim_is_what_lets_a_privileged_container_start_on_this_host(engine_up):
    """Negative control of the shim: plain runc refuses a --privileged container where a capability is missing."""
    if not engine.missing_capabilities():
        pytest.skip("this host's bounding set is complete: dockerd runs plain runc")
    image = nodeimage.tag(catalog.DEFAULT_KUBERNETES_VERSION)
    ok = subprocess.run(["docker", "run", "--rm", "--privileged", "--entrypoint=true", image], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    plain = subprocess.run(["docker", "run", "--rm", "--privileged", "--runtime=runc", "--entrypoint=true", image],
                           capture_output=True, text=True)
    if "Unknown runtime" in plain.stderr or "unknown or invalid runtime" in plain.stderr:
        pytest.skip("this engine was not started by the harness (no plain runc runtime registered beside the shim)")
    assert plain.returncode != 0 and "unable to apply caps" in plain.stderr, plain.stderr


def test_a_run_killed_outright_still_deletes_its_kind_cluster(tmp_path):
    """kill -9 of ``dra-harness run`` once its cluster exists: the reaper deletes the cluster and stops the engine."""
    before = _host()
    argv = [sys.executable, "-m", "dra_harness.cli", "run", "--cluster", "kind", "--nodes", "1",
            "--report-dir", str(tmp_path / "report"), "--", "-k", "inventory"]
    runner = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 900
        while not any(n.startswith("dra-run-") for n in _docker("ps", "--format", "{{.Names}}")):
            assert runner.poll() is None and time.monotonic() < deadline, "the run ended before its kind cluster existed"
            time.sleep(2)
        os.killpg(runner.pid, signal.SIGKILL)  # the runner and everything in its session; the reaper has its own
        runner.wait()
        killed = time.monotonic()

        def restored(now: dict[str, object]) -> bool:
            same = all(now[k] == before[k] for k in ("containers", "networks", "links"))
            return same and bool(before["engine"] or (now["engine"] is False and now["docker_chains"] == before["docker_chains"]))

        # The reaper deletes the cluster, then stops the engine it no longer needs and undoes its host changes.
        while not restored(after := _host()) and time.monotonic() < killed + 300:
            time.sleep(3)
        print(f"kind cluster and engine gone {time.monotonic() - killed:.0f}s after the run was killed")
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
    assert restored(after), (before, after)
