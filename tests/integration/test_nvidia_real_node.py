"""NVIDIA's driver on a real node over emulated GPUs: what a container sees of its GPU through NVML.

The GPU-visibility check's whole chain, every link real: NVIDIA's plugin (v0.5.0, built from its module)
prepares the claim and writes its CDI spec (the emulated ``libnvidia-ml`` and the GPU's device node);
containerd injects it; NVIDIA's CDI hook links the library and updates the container's ld cache; the
NVML probe (pynvml in a Debian Python image) reports the UUIDs it sees, compared with the slice's.
Negative control: the claim's CDI spec edited, between prepare and the container's start, to add another
GPU's device node; the check names the GPU the claim does not hold.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from dra_harness.checks import nvml_probe
from dra_harness.components import images
from dra_harness.kube import builders, rest
from dra_harness.kube.pods import pod_claims
from dra_harness.kube.waits import watch_until
from dra_harness.providers.embedded import nvidia_driver, realcluster
from dra_harness.components.real_node_host import unavailable_reason
from dra_harness.providers.profiles import by_name
from dra_harness.components import nvidia_chart

from .conftest import REAL_NODE

REASON = unavailable_reason()
pytestmark = [pytest.mark.cluster, pytest.mark.skipif(REASON is not None, reason=f"no real nodes here: {REASON}")]
NVIDIA = by_name("nvidia")


@pytest.fixture(scope="module")
def nvidia_node(real_cluster):
    """The real node running NVIDIA's plugin over emulated H100s, the chart's classes, the probe image imported."""
    kube = real_cluster.kube()
    realcluster.import_images(real_cluster, real_cluster.state(), REAL_NODE, [images.tarball(images.nvml_probe_image())])
    root = nvidia_driver.start(real_cluster, REAL_NODE)
    created = []
    try:
        watch_until(kube, rest.RESOURCE_SLICES, lambda items: sum(len(s["spec"].get("devices") or []) for s in items) == 8,
                    120, f"NVIDIA's plugin to publish {REAL_NODE}'s 8 GPUs",
                    field_selector=f"spec.driver={nvidia_driver.DRIVER},spec.nodeName={REAL_NODE}")
        for cls in nvidia_chart.chart_device_classes():
            try:
                kube.create(rest.DEVICE_CLASSES, cls)
                created.append(cls["metadata"]["name"])
            except rest.Conflict:
                pass
        yield root
    finally:
        for name in created:
            kube.delete(rest.DEVICE_CLASSES, name)
        nvidia_driver.stop(real_cluster, kube, REAL_NODE)


@pytest.fixture
def namespace(real_cluster):
    kube = real_cluster.kube()
    run_id = uuid.uuid4().hex[:8]
    ns = f"nvr-{run_id}"
    kube.create(rest.NAMESPACES, {"metadata": {"name": ns}})
    kube.create(rest.CONFIG_MAPS, nvml_probe.configmap("nvml-probe", run_id), ns)
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, builders.claim_template("one-gpu", run_id, [
        builders.exactly("gpu", NVIDIA.device_class)]), ns)
    yield ns, run_id
    kube.delete(rest.NAMESPACES, ns)


def _probe(name: str, run_id: str) -> dict:
    body = nvml_probe.pod(name, run_id, images.nvml_probe_image().name, "nvml-probe", {"gpu": {"template": "one-gpu"}})
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": REAL_NODE}
    return body


def _published(kube) -> dict:
    return {(s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]): {"node": s["spec"].get("nodeName"), "device": d}
            for s in kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={nvidia_driver.DRIVER}")
            for d in s["spec"].get("devices") or []}


def test_a_container_on_a_real_node_sees_through_nvml_exactly_the_emulated_gpu_its_claim_holds(real_cluster, nvidia_node, namespace):
    kube = real_cluster.kube()
    ns, run_id = namespace
    report, _, held = nvml_probe.run(kube, ns, _probe("sees-one", run_id), timeout=180)
    published = _published(kube)
    allocated = nvml_probe.allocated_gpus(held, published, NVIDIA)
    assert nvml_probe.compare(report, allocated) == [], report.raw
    assert len(report.units) == 1 and report.units <= {NVIDIA.device_attribute(v["device"], "uuid") for v in published.values()}
    assert [g.memory_total for g in report.gpus] == [80 * 1024**3], report.raw


def _claim_spec(cdi_dir: Path, claim_uid: str) -> Path:
    specs = [p for p in cdi_dir.glob("*") if p.is_file() and claim_uid in p.read_text()]
    assert len(specs) == 1, f"CDI specs naming claim {claim_uid} in {cdi_dir}: {[p.name for p in cdi_dir.glob('*')]}"
    return specs[0]


def test_a_gpu_added_to_the_claims_cdi_spec_is_seen_and_the_check_names_it(real_cluster, nvidia_node, namespace):
    """The negative control: the container gets a device node its claim does not hold."""
    kube = real_cluster.kube()
    ns, run_id = namespace
    body = _probe("sees-extra", run_id)
    # The claim is prepared (its CDI spec written) before the init container runs; the probe starts after it.
    body["spec"]["initContainers"] = [{"name": "hold", "image": body["spec"]["containers"][0]["image"],
                                       "command": ["sh", "-c", "sleep 15"],
                                       "securityContext": body["spec"]["containers"][0]["securityContext"]}]
    kube.create(rest.PODS, body, ns)
    pod = watch_until(kube, rest.PODS, lambda ps: bool(ps and any((s.get("state") or {}).get("running")
                                                                    for s in ps[0]["status"].get("initContainerStatuses") or [])),
                      120, "the probe's init container to run", namespace=ns, field_selector="metadata.name=sees-extra")[0]
    claim = next(iter(pod_claims(kube, pod).values()))
    allocated = nvml_probe.allocated_gpus([claim], _published(kube), NVIDIA)[0]
    spec_path = _claim_spec(realcluster.node(real_cluster, REAL_NODE).cdi_dir, claim["metadata"]["uid"])
    spec = yaml.safe_load(spec_path.read_text())
    nodes = [n for d in spec["devices"] for n in d["containerEdits"].get("deviceNodes") or []]
    held_minors = {int(Path(n["path"]).name.removeprefix("nvidia")) for n in nodes if Path(n["path"]).name[6:].isdigit()}
    extra = next(m for m in range(nvidia_driver.GPUS) if m not in held_minors)
    spec["devices"][0]["containerEdits"].setdefault("deviceNodes", []).append(
        {"path": f"/dev/nvidia{extra}", "hostPath": str(nvidia_node / "dev" / f"nvidia{extra}")})
    staged = spec_path.with_name(spec_path.name + ".tmp")
    staged.write_text(yaml.safe_dump(spec))
    staged.replace(spec_path)
    finished = watch_until(kube, rest.PODS, lambda ps: bool(ps and ps[0]["status"].get("phase") in ("Succeeded", "Failed")),
                           120, "the probe to finish", namespace=ns, field_selector="metadata.name=sees-extra")[0]
    report = nvml_probe.parse(nvml_probe.output_of(kube, ns, "sees-extra"))
    problems = nvml_probe.compare(report, [allocated])
    assert finished["status"]["phase"] == "Succeeded", finished["status"]
    assert len(report.units) == 2 and allocated.uuid in report.units, report.raw
    extra_uuid = next(iter(report.units - {allocated.uuid}))
    assert problems == [f"the container sees {extra_uuid}, which its claims do not hold"], problems
