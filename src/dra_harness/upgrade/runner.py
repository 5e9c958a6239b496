"""Perform an in-place upgrade of the embedded cluster under live claims, checking after every step.

The cluster comes up at the old release with :mod:`~dra_harness.upgrade.workloads` Running; each
:mod:`~dra_harness.upgrade.plan` step swaps one process for the new release's binary
(:meth:`~dra_harness.providers.local.LocalClusterApi.swap`) and is followed by a new claim's pod (does allocation still work, and
how soon) and a snapshot compared with the one taken before the first step. After the last step
the stored objects are read from etcd: which API version each is stored under, and whether the new
API server serves that version. Nothing here judges by timing; times are evidence.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.errors import HarnessError, InputError
from dra_harness.kube import rest
from dra_harness.kube.pods import pod_claims
from dra_harness.kube.waits import wait_for_deletion
from dra_harness.retrying import NotYet, until
from dra_harness.kube.rest import Kube
from dra_harness.components.catalog import CONTROL_PLANE
from dra_harness.providers import open_cluster
from dra_harness.providers.local import LocalClusterApi
from dra_harness.providers.profiles import EXAMPLE_DRIVER as DRIVER_NAME
from dra_harness.providers.localstate import ClusterSpec
from dra_harness.upgrade import faults, plan, slices, snapshot, workloads
from dra_harness.upgrade import reboot as reboot_mod
from dra_harness.upgrade import skew as skew_mod
from dra_harness.upgrade.plan import Step

log = logging.getLogger(__name__)
#: How long an ended pod's claim may take to be unprepared (its pod gone, its CDI spec removed): a few seconds
#: on a healthy node (the whole unprepare and reboot phase took about 7 s after a clean upgrade here).
UNPREPARE_DEADLINE_S = 30.0
#: The resource.k8s.io resources and their etcd prefixes (the API server keys objects by resource, not group).
STORED_RESOURCES = ("resourceclaims", "resourceclaimtemplates", "resourceslices", "deviceclasses")


@dataclass(frozen=True)
class UpgradeSpec:
    from_version: str
    to_version: str
    real_nodes: int = 0
    nodes: int = 4
    devices_per_node: int = 8
    #: Faults (:data:`faults.FAULTS`) injected after the first step: negative controls.
    inject: tuple[str, ...] = ()
    #: The example driver's release at the start, the one it is rolled to, and whether it is rolled back after.
    driver_from: str = catalog.EXAMPLE_DRIVER_VERSION
    driver_to: str = catalog.EXAMPLE_DRIVER_VERSION
    and_back: bool = False
    #: Before the upgrade, try the first real node's kubelet at ``to`` under the ``from`` control plane.
    unsupported_skew: bool = False
    #: The first real node's driver runs as a DaemonSet's pod rolled by its image with this strategy
    #: (``DRIVER_DAEMONSET_STRATEGIES``); None: a process there too, as on the simulated nodes.
    driver_daemonset: str | None = None


@dataclass
class StepResult:
    process: str
    kind: str
    version: str
    #: Seconds since the first step began.
    started_at: float
    #: How long the old process took to stop (SIGTERM; it drains), and from then until the new one
    #: serves (a kubelet: its node Ready at the new release).
    stopping_s: float
    serving_after_s: float
    #: From the step's start until a new claim's pod ran; None when none did.
    first_allocation_after_s: float | None
    #: Real node -> seconds until a new pod with a claim ran there (after the scheduler, a kubelet or a driver DaemonSet).
    real_node_pod_s: dict[str, float] = field(default_factory=dict)
    broken: dict[str, list[str]] = field(default_factory=dict)
    #: The Warning events of the step's probe pods: why a new claim's pod was slow to run.
    probe_warnings: list[str] = field(default_factory=list)

    def failed_probe_events(self) -> list[str]:
        """The probes' Failed* warnings (a prepare or mount that failed and was retried), not the noise."""
        return [w for w in self.probe_warnings if [*w.split(": "), ""][1].startswith("Failed")]

    def slow_pod_finding(self) -> str:
        ran = ", ".join(f"on {n} after {t:.1f} s" for n, t in self.real_node_pod_s.items())
        return (f"right after {self.process} -> v{self.version} (old one stopped in {self.stopping_s:.1f} s, new one up "
                f"{self.serving_after_s:.1f} s later) a new claim's pod first failed, then ran {ran or 'after a retry'}: "
                f"{self.failed_probe_events()[0][:240]}")


@dataclass
class UpgradeResult:
    spec: UpgradeSpec
    steps: list[StepResult] = field(default_factory=list)
    injected: list[str] = field(default_factory=list)
    #: API version -> count, per resource, as stored in etcd before the first step and after the last.
    stored_before: dict[str, dict[str, int]] = field(default_factory=dict)
    stored_after: dict[str, dict[str, int]] = field(default_factory=dict)
    #: resource.k8s.io versions the new API server serves.
    served_after: list[str] = field(default_factory=list)
    #: Stretches in which a node published fewer devices than it has (findings, not breaches).
    slice_gaps: list[slices.Gap] = field(default_factory=list)
    #: Breaches of "unprepared" (None: no real node, not established).
    unprepared: list[str] | None = None
    #: The newer kubelet under the older control plane, tried before the upgrade (a finding).
    skew: skew_mod.SkewResult | None = None
    #: The first real node rebooted after the upgrade, and what became of its pods (a finding).
    reboot: reboot_mod.RebootResult | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def invariants(self) -> dict[str, list[str]]:
        """Invariant -> every breach found (each prefixed with its step); empty lists held."""
        found: dict[str, list[str]] = {name: [] for name in (*snapshot.INVARIANTS, "allocates", "storage")}
        seen: set[str] = set()
        for s in self.steps:  # each step is compared with the start: a breach is named at the first step it shows
            for name, breaches in s.broken.items():
                found[name] += [f"after {s.process}: {b}" for b in breaches if b not in seen]
                seen.update(breaches)
        if self.unprepared is not None:
            found["unprepared"] = self.unprepared
        # Our workloads hold claims: finding none stored means etcd was not read, not that all is well.
        if not self.stored_after.get("resourceclaims"):
            found["storage"].append("no ResourceClaim was found in etcd after the upgrade: storage versions not established")
        for resource, versions in self.stored_after.items():
            for version in versions:
                if version.split("/")[-1] not in self.served_after:
                    found["storage"].append(f"{resource} stored as {version}, which the new API server does not serve")
        return found

    def step_at(self, at: float) -> str:
        """The process whose step was under way ``at`` seconds after the first began."""
        current = self.steps[0].process if self.steps else "-"
        for st in self.steps:
            if st.started_at <= at:
                current = st.process
        return current

    def findings(self) -> list[str]:
        """What the upgrade showed that is upstream behaviour to plan around, one sentence each."""
        expected = self.spec.devices_per_node
        found = [self.skew.finding()] if self.skew else []
        found += [f"during {self.step_at(g.start)}: {g.describe(expected)}" for g in self.slice_gaps]
        found += [s.slow_pod_finding() for s in self.steps if s.failed_probe_events()]
        return found + ([self.reboot.finding()] if self.reboot else [])

    @property
    def held(self) -> bool:
        return not any(self.invariants().values())


INVARIANT_TEXT = {
    **snapshot.INVARIANTS,
    "allocates": "a new claim's pod runs after every step (on a real node too, under a control plane one minor ahead of its kubelet)",
    "storage": "every resource.k8s.io object is stored in a version the new API server serves, and reads back unchanged",
    "unprepared": "a claim prepared before the upgrade is unprepared (its CDI spec removed) once its pod ends after it",
}


def _stored(cluster: LocalClusterApi) -> dict[str, dict[str, int]]:
    """Resource -> stored API version -> objects, as etcd holds them."""
    etcd = cluster.etcd()
    counts: dict[str, dict[str, int]] = {}
    for resource in STORED_RESOURCES:
        for version in etcd.stored_versions(f"/registry/{resource}/").values():
            counts.setdefault(resource, {}).setdefault(version, 0)
            counts[resource][version] += 1
    return counts


def _served(kube: Kube) -> list[str]:
    group = kube.raw("/apis/resource.k8s.io")
    return sorted(v["version"] for v in json.loads(group).get("versions", []))


def build(spec: UpgradeSpec) -> dict[str, dict[str, str]]:
    """Build every release the upgrade runs (cached after the first time): release -> binary name -> path,
    Kubernetes releases and example-driver releases alike (their version strings never meet)."""
    out: dict[str, dict[str, str]] = {}
    comps = [c for v in {spec.from_version, spec.to_version} for c in catalog.for_cluster(v, real_nodes=spec.real_nodes > 0)]
    comps += [catalog.example_driver(v) for v in {spec.driver_from, spec.driver_to}]
    for b in builder.build_all(list({c.dirname: c for c in comps}.values())).values():
        version = b.component.version
        out.setdefault(version, {}).update({name: str(b.binary(name)) for name in b.component.binaries})
    return out


def check(spec: UpgradeSpec) -> None:
    """Refuse what cannot be performed, before anything is built or started (one line, for the CLI)."""
    plan.check(spec.from_version, spec.to_version, spec.driver_from, spec.driver_to)
    faults.check(spec.inject, spec.real_nodes, bool(spec.driver_daemonset))
    real_upgrade = spec.real_nodes and spec.to_version != spec.from_version
    if spec.unsupported_skew and not real_upgrade:
        raise InputError("--unsupported-skew needs a real node (--real-nodes 1) and a Kubernetes upgrade (--to the next minor)")
    if spec.driver_daemonset and not spec.real_nodes:
        raise InputError("--driver-daemonset needs a real node (--real-nodes 1): a DaemonSet's pod runs in a container")


def run(spec: UpgradeSpec, say: Callable[[str], None] = lambda s: None) -> UpgradeResult:
    """Bring up ``from``, create the workloads, perform every step, take the cluster down; never raises
    for a broken invariant (the result says it), only when the upgrade itself cannot proceed."""
    check(spec)
    binaries = build(spec)
    run_id = uuid.uuid4().hex[:12]
    name = f"upgrade-{run_id[:6]}"
    cluster = open_cluster(name)
    result = UpgradeResult(spec)
    cluster_spec = ClusterSpec(name=name, nodes=spec.nodes, gpus_per_node=spec.devices_per_node,
                               k8s_version=spec.from_version, real_nodes=spec.real_nodes, owner_pid=os.getpid(),
                               driver_version=spec.driver_from)
    say(f"bringing up v{spec.from_version}: {spec.nodes} simulated + {spec.real_nodes} real nodes")
    state = cluster.up(cluster_spec, timeout=240, say=say)
    result.timings["up_s"] = state.timings["up"]
    try:
        _perform(cluster, cluster_spec, run_id, binaries, result, say)
    finally:
        say("taking the cluster down")
        cluster.down()
    return result


def _perform(cluster: LocalClusterApi, cs: ClusterSpec, run_id: str, binaries: dict[str, dict[str, str]], result: UpgradeResult,
             say: Callable[[str], None]) -> None:
    kube = cluster.kube()
    namespace = f"upgrade-{run_id}"
    sp = result.spec
    pod_nodes = tuple(cs.real_node_names()[:1]) if sp.driver_daemonset else ()
    if sp.driver_daemonset and pod_nodes:
        say(f"handing {pod_nodes[0]}'s driver to a DaemonSet at v{sp.driver_from}, rolled by {sp.driver_daemonset}")
        started = time.monotonic()
        cluster.install_driver_daemonset(kube, pod_nodes[0], sp.driver_from,
                                 binaries[sp.driver_from]["dra-example-kubeletplugin"], sp.driver_daemonset)
        result.timings["daemonset_install_s"] = time.monotonic() - started
    say("creating workloads: tensor-parallel, template, shared and configured claims" +
        (", pods on real nodes" if cs.real_nodes else ""))
    w = workloads.create(kube, run_id, namespace, cs.real_node_names(), cs.gpus_per_node)
    cdi_dirs = {n: cluster.driver_dirs(n)["cdi"] for n in cs.real_node_names()}
    if sp.unsupported_skew and cs.real_nodes and sp.to_version != sp.from_version:
        node = cs.real_node_names()[0]
        say(f"unsupported skew: kubelet v{sp.to_version} on {node} under the v{sp.from_version} control plane, then back")
        result.skew = skew_mod.probe(cluster, kube, w, node, (sp.to_version, binaries[sp.to_version]["kubelet"]),
                                     (sp.from_version, binaries[sp.from_version]["kubelet"]), cdi_dirs)
    baseline = snapshot.take(kube, namespace, cdi_dirs)
    result.stored_before = _stored(cluster)
    t0 = time.monotonic()
    sampler = slices.SliceSampler(kube, DRIVER_NAME, cs.all_node_names(), t0)
    sampler.start()
    try:
        steps = plan.steps(sp.from_version, sp.to_version, cs.node_names(), cs.real_node_names(), sp.driver_to,
                           sp.driver_from if sp.and_back else None, pod_nodes)
        for i, step in enumerate(steps):
            say(f"step {i + 1}/{len(steps)}: {step.process} -> v{step.version}")
            last = sp.inject if i == len(steps) - 1 else ()
            with faults.around_last_step(last, kube, result.injected) as probe_deadline:
                result.steps.append(_step(cluster, kube, step, binaries[step.version], w, cs, t0, i, baseline, cdi_dirs,
                                          probe_deadline or workloads.RUNNING_DEADLINE_S))
            if i == 0:  # a fault is judged by the next step's snapshot, like any other change
                later = (*faults.AT_UNPREPARE, *faults.AT_LAST_STEP, *faults.AT_STORAGE_READ)
                for fault in (f for f in result.spec.inject if f not in later):
                    say(f"injecting fault {fault}")
                    result.injected.append(faults.inject(fault, cluster, kube, w))
    finally:
        sampler.stop()
    result.slice_gaps = slices.gaps(sampler.samples, cs.gpus_per_node)
    with faults.around_storage_read(sp.inject, cluster, namespace, result.injected):
        result.stored_after = _stored(cluster)
    result.served_after = _served(kube)
    result.timings["steps_s"] = time.monotonic() - t0
    if cs.real_nodes:
        say("ending a pod prepared before the upgrade: its claim must be unprepared")
        node = cs.real_node_names()[0]
        with faults.at_unprepare(sp.inject, cluster, node, result.injected):
            result.unprepared = _unprepare(kube, w, node, cdi_dirs)
        # The ended pod goes (a stopped driver held it up) before the reboot looks at the node's pods;
        # if it does not, the unprepared invariant has already said so.
        try:
            wait_for_deletion(kube, rest.PODS, f"template-{node}", UNPREPARE_DEADLINE_S, namespace)
        except HarnessError:
            pass
        # After the invariants: a reboot kills every container by design.
        say(f"rebooting {node} with its pods")
        on_node = [p["metadata"]["name"] for p in kube.list(rest.PODS, namespace) if p["spec"].get("nodeName") == node]
        result.reboot = reboot_mod.observe(cluster, kube, namespace, on_node, node, cs.gpus_per_node)


def _unprepare(kube: Kube, w: workloads.Workloads, node: str, cdi_dirs: dict[str, Path]) -> list[str]:
    """End the template pod on ``node`` (prepared before the first step) and wait until the driver now
    running has removed its claim's CDI spec; returns the breaches."""
    pod = f"template-{node}"
    uid = pod_claims(kube, kube.get(rest.PODS, pod, w.namespace))["gpu"]["metadata"]["uid"]
    specs = [f for f in cdi_dirs[node].glob("*") if uid in f.name]
    if not specs:
        return [f"no CDI spec of claim {uid} ({w.namespace}/{pod}) was found on {node}: unprepare not established"]
    kube.delete(rest.PODS, pod, w.namespace)
    try:  # the pod goes once the kubelet has had the driver unprepare its claim: seconds, normally
        wait_for_deletion(kube, rest.PODS, pod, UNPREPARE_DEADLINE_S, w.namespace)
        until(time.monotonic() + 30, 0.2, log, f"the CDI spec of claim {uid} to be removed")(
            lambda: _gone_or_not_yet(specs))
    except (HarnessError, NotYet) as e:
        return [f"the claim of {w.namespace}/{pod}, prepared before the upgrade, was not unprepared after its pod ended: {e}"]
    return []


def _gone_or_not_yet(paths: list[Path]) -> None:
    left = [p.name for p in paths if p.exists()]
    if left:
        raise NotYet(f"still there: {', '.join(left)}")


def _real_probe_nodes(step: Step, cs: ClusterSpec) -> list[str]:
    """Where a new pod must also run after ``step``: every real node once the whole control plane is
    new (its kubelet one minor behind: the supported skew), and a kubelet's or driver DaemonSet's own
    node after its swap or roll."""
    if step.process == CONTROL_PLANE[-1]:
        return cs.real_node_names()
    if step.daemonset_node:
        return [step.daemonset_node]
    return [step.process.removeprefix("kubelet-")] if step.kind == "kubelet" else []


def _step(cluster: LocalClusterApi, kube: Kube, step: Step, new: dict[str, str], w: workloads.Workloads, cs: ClusterSpec,
          t0: float, index: int, baseline: snapshot.Snapshot, cdi_dirs: dict[str, Path],
          probe_deadline: float = workloads.RUNNING_DEADLINE_S) -> StepResult:
    started = time.monotonic()
    if step.daemonset_node:
        stop_s, serving = cluster.roll_driver_daemonset(kube, step.daemonset_node, step.version, new[step.binary])
    else:
        stop_s, serving = cluster.swap(step.process, step.version, new[step.binary])
    broken: dict[str, list[str]] = {"allocates": []}
    first_after: float | None = None
    warnings: list[str] = []
    try:
        workloads.probe(kube, w.run_id, w.namespace, f"probe-{index}", timeout=probe_deadline, warnings=warnings)
        first_after = round(time.monotonic() - started, 3)
    except HarnessError as e:  # a failure to allocate is the finding, with its reason
        broken["allocates"].append(f"a new claim's pod did not run: {e}")
    real: dict[str, float] = {}
    for n in _real_probe_nodes(step, cs):
        try:
            real[n] = round(workloads.probe(kube, w.run_id, w.namespace, f"probe-{index}-{n}", node=n, timeout=probe_deadline,
                                            warnings=warnings), 3)
        except HarnessError as e:
            broken["allocates"].append(f"a new claim's pod did not run on {n}: {e}")
    broken.update(snapshot.differences(baseline, snapshot.take(kube, w.namespace, cdi_dirs)))
    return StepResult(step.process, step.kind, step.version, round(started - t0, 3), round(stop_s, 3), round(serving, 3),
                      first_after, real, broken, warnings)
