"""What containers really see of their GPUs, read with NVML from inside an unprivileged pod.

From the guidance: the claim says which device a pod should get; only the container can
say which it does get. On real GPUs (the nvidia profile) each test runs the NVML probe
(``--probe-image``: any image with python3 and nvidia-ml-py) with a claim and compares
the GPU UUIDs NVML reports with the ``uuid`` attributes of the allocated devices:
exactly those, no more (isolation) and no fewer. Skipped on other drivers, on
simulated nodes, and without ``--probe-image``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from dra_harness.checks import nvml_probe
from dra_harness.kube import rest
from dra_harness.kube.pods import allocated_devices, allocated_node
from dra_harness.plugin.stash import run_config

pytestmark = pytest.mark.concern("gpu-visibility", "GPU visibility in containers")


SCRIPT_CONFIGMAP = "nvml-probe"


@dataclass
class Probe:
    cluster: object
    namespace: str
    image: str

    def run(self, name: str, hold: bool = False, **claims: dict[str, str]):
        """Run one probe pod with ``claims`` (pod-level name -> template/claim); return (report, claims, pod).
        ``hold``: the pod keeps running, holding its claims, until :meth:`release`."""
        body = nvml_probe.pod(name, self.cluster.run_id, self.image, SCRIPT_CONFIGMAP, claims, hold=hold)
        # Only a node that runs containers can answer (a simulated node would keep the probe Running for ever).
        body["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": self.cluster.container_nodes()}]}]}}}
        report, pod, held = nvml_probe.run(self.cluster.kube, self.namespace, body)
        return report, held, pod

    def release(self, name: str) -> None:
        self.cluster.kube.delete(rest.PODS, name, self.namespace)

    def problems(self, report, held) -> list[str]:
        return nvml_probe.compare(report, nvml_probe.allocated_gpus(held, self.cluster.published(), self.cluster.profile))


@pytest.fixture
def probe(request, cluster) -> Probe:
    """The hook: skips unless the driver is checked through NVML and a probe image is given (before any namespace exists)."""
    if cluster.profile.container_view != "nvml":
        pytest.skip(f"the {cluster.profile.name} profile's containers are not checked with NVML (real NVIDIA GPUs only)")
    image = run_config(request.config).probe_image or cluster.provider.nvml_probe_image
    if not image:
        pytest.skip("pass --probe-image (an image with python3 and nvidia-ml-py) to check what containers see")
    if not cluster.runs_containers():
        pytest.skip("containers do not run on simulated (KWOK) nodes")
    namespace = request.getfixturevalue("namespace")
    cluster.kube.create(rest.CONFIG_MAPS, nvml_probe.configmap(SCRIPT_CONFIGMAP, cluster.run_id), namespace)
    return Probe(cluster, namespace, image)


def test_a_pod_sees_exactly_the_gpu_its_claim_holds(cluster, probe, namespace, evidence):
    cluster.template(namespace, "one-gpu")
    report, held, pod = probe.run("sees-one", gpu={"template": "one-gpu"})
    problems = probe.problems(report, held)
    assert not problems, "\n".join(problems)
    assert len(report.units) == 1
    evidence.record(node=pod["spec"]["nodeName"], visible=sorted(report.units),
                    compute_mode=[g.compute_mode for g in report.gpus], mig=[g.mig_enabled for g in report.gpus])


def test_the_driver_version_a_slice_advertises_is_the_one_the_container_runs(cluster, probe, namespace, evidence):
    """AI Conformance's driver_runtime_management: what DRA advertises (driverVersion, cudaDriverVersion of the
    allocated device) is what is installed, as NVML in the pod reports it."""
    cluster.template(namespace, "one-gpu")
    report, held, pod = probe.run("versions", gpu={"template": "one-gpu"})
    published = cluster.published()
    devices = [published[d.key]["device"] for c in held for d in allocated_devices(c) if d.key in published]
    assert devices, f"the probe's claim holds no published device: {held}"
    problems = nvml_probe.version_problems(report, devices, cluster.profile)
    evidence.record(node=pod["spec"]["nodeName"], nvml=report.raw.get("nvml"),
                    published={d.get("name", "?"): {k: cluster.profile.device_attribute(d, k) for k in ("driverVersion", "cudaDriverVersion")}
                               for d in devices})
    assert not problems, "\n".join(problems)

def _probe_each(probe, names, gpu: dict) -> tuple[dict, dict]:
    """Probe one pod per name, all holding their claims at once (a finished pod's claim is released, and the
    next pod could be given its GPU); each must see exactly what its claim holds.
    -> units seen, (pod node, claim node)."""
    seen, placed = {}, {}
    try:
        for name in names:
            report, held, pod = probe.run(name, hold=True, gpu=gpu)
            problems = probe.problems(report, held)
            assert not problems, f"{name}: " + "\n".join(problems)
            seen[name] = report.units
            placed[name] = (pod["spec"]["nodeName"], allocated_node(held[0]))
    finally:
        for name in names:
            probe.release(name)
    return seen, placed


def test_pods_with_their_own_claims_see_different_gpus(cluster, probe, namespace, evidence):
    free = len(cluster.published()) - len(cluster.allocations())
    if free < 2:
        pytest.skip(f"needs 2 free GPUs, {free} free")
    cluster.template(namespace, "one-gpu")
    seen, _ = _probe_each(probe, ("own-a", "own-b"), {"template": "one-gpu"})
    assert seen["own-a"].isdisjoint(seen["own-b"]), f"two template claims, one GPU: {seen}"
    evidence.record(visible={k: sorted(v) for k, v in seen.items()})


def test_pods_sharing_a_claim_see_the_same_gpu(cluster, probe, namespace, evidence):
    cluster.claim(namespace, "shared")
    seen, placed = _probe_each(probe, ("share-a", "share-b"), {"claim": "shared"})
    assert all(node == claim_node for node, claim_node in placed.values()), f"a pod off its claim's node: {placed}"
    assert seen["share-a"] == seen["share-b"], f"one claim, different GPUs: {seen}"
    evidence.record(visible=sorted(seen["share-a"]))


def _gpu_sharing_strategies() -> list[str]:
    from dra_harness.providers.profiles import by_name

    return [k for k, v in by_name("nvidia").sharing_configs.items() if v["kind"] == "GpuConfig"]


@pytest.mark.parametrize("strategy", _gpu_sharing_strategies())
def test_pods_sharing_a_configured_claim_see_the_same_gpu(cluster, probe, namespace, evidence, strategy):
    """The profile's opaque config per strategy (the driver needs its TimeSlicingSettings / MPSSupport gates).

    On emulated GPUs the time-slice the driver set is read back from the emulated nvidia-smi; on real GPUs
    nothing reports it (NVML has no call for it), so only what the containers see is checked."""
    config = cluster.profile.sharing_configs[strategy]
    emulated = any(cluster.provider.gpu_settings_applied(n) is not None for n in cluster.container_nodes())
    if strategy == "MPS" and emulated:
        pytest.skip("not established: MPS needs NVIDIA's MPS control daemon (nvidia-cuda-mps-control, from the "
                    "driver's image), which emulated GPUs cannot run")
    cluster.claim(namespace, "shared", config=[{"opaque": {"driver": cluster.driver, "parameters": config}}])
    reports = {}
    try:
        for name in ("cfg-a", "cfg-b"):  # both at once: the claim is shared while both hold it
            report, held, _ = probe.run(name, hold=True, gpu={"claim": "shared"})
            problems = probe.problems(report, held)
            assert not problems, f"{name}: " + "\n".join(problems)
            reports[name] = report
    finally:
        for name in ("cfg-a", "cfg-b"):
            probe.release(name)
    a, b = reports["cfg-a"], reports["cfg-b"]
    assert a.units == b.units, f"{strategy}: one claim, different GPUs: {a.units} vs {b.units}"
    applied = cluster.provider.gpu_settings_applied(a.node) if a.node else None
    if strategy == "TimeSlicing" and applied is not None:
        wanted = timeslice_calls(sorted(a.uuids), config["sharing"]["timeSlicingConfig"]["interval"])
        assert set(wanted) <= set(applied), f"the driver did not apply the time-slice on {a.node}: wanted {wanted}, nvidia-smi saw {applied}"
        evidence.record(nvidia_smi=wanted)
    if strategy == "MPS":
        # The driver points MPS clients at its control daemon's pipe directory.
        pipes = {r.raw["env"].get("CUDA_MPS_PIPE_DIRECTORY") for r in reports.values()}
        assert None not in pipes, f"MPS claim, but no CUDA_MPS_PIPE_DIRECTORY in the containers: {pipes}"
    evidence.record(strategy=strategy, visible=sorted(a.units), compute_mode=[g.compute_mode for g in a.gpus])


#: NVIDIA's GpuConfig intervals as nvidia-smi compute-policy numbers them.
TIMESLICE = {"Default": 0, "Short": 1, "Medium": 2, "Long": 3}


def timeslice_calls(uuids: list[str], interval: str) -> list[str]:
    """The nvidia-smi calls NVIDIA's plugin makes to time-slice ``uuids``: compute mode DEFAULT, then the interval."""
    return [f"-i {u} -c DEFAULT" for u in uuids] + [f"compute-policy -i {u} --set-timeslice {TIMESLICE[interval]}" for u in uuids]


def test_a_pod_without_a_claim_sees_no_gpu(cluster, probe, namespace, evidence):
    """Isolation's control: a pod that asked for nothing must not reach any GPU through NVML."""
    report, _, pod = probe.run("no-claim")
    assert not report.units, f"a pod without a claim sees {sorted(report.units)} on {pod['spec']['nodeName']}"
    evidence.record(node=pod["spec"]["nodeName"], nvml=report.error or "no devices")
