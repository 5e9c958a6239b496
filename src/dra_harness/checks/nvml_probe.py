"""What a container really sees of its GPUs: the NVML probe pod, its report, and the check against the claim.

On real GPUs the claim's allocation says which devices a pod *should* get; only the
container can say which it *does* get. The probe (``nvml_probe_script.py``, shipped
to the pod in a ConfigMap and run by any image with Python and ``nvidia-ml-py``,
``--probe-image``) reports the GPUs NVML sees. We compare UUIDs, never indices
(NVML renumbers from 0 in every container), and PCI bus IDs in one normal form.

The pod is deliberately unprivileged: a privileged container sees every GPU of the
node whatever it was allocated, which would make the check meaningless.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from dra_harness.checks.config_webhook import GATE_OFF
from dra_harness.kube import rest
from dra_harness.kube.builders import GRACE_S, meta
from dra_harness.kube.events import events_for
from dra_harness.kube.pods import allocated_devices, pending_reason, pod_claims
from dra_harness.kube.types import Obj
from dra_harness.kube.waits import WaitTimeout, wait_for_object
from dra_harness.providers.profiles import DriverProfile
from dra_harness.errors import CheckError, NotEstablished

SCRIPT_PATH = Path(__file__).with_name("nvml_probe_script.py")
SCRIPT = SCRIPT_PATH.read_text()
MARKER = "DRA_HARNESS_NVML_PROBE"
FORMAT = "dra-harness.io/nvml-probe/v1"
SCRIPT_KEY = "nvml_probe.py"
MOUNT = "/dra-harness-probe"
HOLD_ENV = "DRA_HARNESS_PROBE_HOLD"
TERMINATION_LOG = "/dev/termination-log"


class ProbeOutputError(CheckError):
    """The pod's output holds no probe report (wrong image, crashed before printing); one line."""


# -- objects ----------------------------------------------------------------------------
def configmap(name: str, run_id: str) -> Obj:
    return {"metadata": meta(name, run_id), "data": {SCRIPT_KEY: SCRIPT}}


def pod(name: str, run_id: str, image: str, configmap_name: str, claims: dict[str, dict[str, str]] | None = None,
        hold: bool = False) -> Obj:
    """A run-once, unprivileged pod that runs the probe with every claim in ``claims``.

    ``claims`` maps the pod-level claim name to ``{"template": name}`` or ``{"claim": name}``. ``hold``: the pod
    stays running after its report (Ready once written) until deleted, so its claims stay allocated while
    another pod runs: a finished pod's claims are released, and the next pod may be given the same GPU.
    """
    pod_claims = [
        {"name": n, **({"resourceClaimTemplateName": r["template"]} if "template" in r else {"resourceClaimName": r["claim"]})}
        for n, r in (claims or {}).items()
    ]
    container: Obj = {
        "name": "probe",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", f"{MOUNT}/{SCRIPT_KEY}"],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        ],
        "volumeMounts": [{"name": "probe", "mountPath": MOUNT, "readOnly": True}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "resources": {"claims": [{"name": c["name"]} for c in pod_claims]},
    }
    if hold:
        container["env"].append({"name": HOLD_ENV, "value": "1"})
        # The script writes the termination log after its report: ready = reported (python3: the one tool the image has).
        container["readinessProbe"] = {"periodSeconds": 1, "exec": {"command": [
            "python3", "-c", f"import os,sys; sys.exit(not os.path.getsize({TERMINATION_LOG!r}))"]}}
    spec: Obj = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": GRACE_S,
        "containers": [container],
        "volumes": [{"name": "probe", "configMap": {"name": configmap_name}}],
    }
    if pod_claims:
        spec["resourceClaims"] = pod_claims
    return {"metadata": meta(name, run_id), "spec": spec}


# -- the report ------------------------------------------------------------------------
def normal_pci(bus_id: str | None) -> str | None:
    """``00000000:1B:00.0`` (NVML) and ``0000:1b:00.0`` (slice attribute) -> ``0000:1b:00.0``."""
    if not bus_id:
        return None
    m = re.fullmatch(r"([0-9a-fA-F]+):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])", bus_id.strip())
    if not m:
        return bus_id.strip().lower()
    domain, bus, dev, fn = m.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{dev.lower()}.{fn}"


@dataclass(frozen=True)
class VisibleGpu:
    uuid: str
    pci_bus_id: str | None
    mig_uuids: tuple[str, ...] = ()
    mig_enabled: bool = False
    memory_total: int | None = None
    memory_used: int | None = None
    compute_mode: str | None = None
    processes: int | None = None


@dataclass
class ProbeReport:
    raw: Obj
    gpus: list[VisibleGpu] = field(default_factory=list)
    error: str | None = None
    node: str | None = None

    @property
    def units(self) -> set[str]:
        """What a DRA driver allocates, as NVML names it: MIG device UUIDs on MIG-enabled GPUs, else GPU UUIDs."""
        out: set[str] = set()
        for g in self.gpus:
            out |= set(g.mig_uuids) if g.mig_enabled else {g.uuid}
        return out

    @property
    def uuids(self) -> set[str]:
        return {g.uuid for g in self.gpus}


def parse(output: str) -> ProbeReport:
    """The report from a pod's log (the marker line) or its termination message (bare JSON)."""
    raw = None
    for line in reversed(output.splitlines()):
        if line.startswith(MARKER + " "):
            raw = line[len(MARKER) + 1:]
            break
    if raw is None:
        raw = output.strip()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        first = (output.strip().splitlines() or ["empty output"])[-1][:160]
        raise ProbeOutputError(f"no NVML probe report in the pod's output (last line: {first!r})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ProbeOutputError(f"not an NVML probe report (format {data.get('format') if isinstance(data, dict) else type(data).__name__!r})")
    report = ProbeReport(raw=data, node=data.get("node"))
    if data.get("error"):
        e = data["error"]
        report.error = f"{e.get('call')}: {e.get('type')}: {e.get('message')}"
    for d in data.get("devices") or []:
        mig = d.get("migMode") or {}
        memory = d.get("memory") or {}
        report.gpus.append(VisibleGpu(
            uuid=d.get("uuid") or "",
            pci_bus_id=normal_pci(d.get("pciBusId")),
            mig_uuids=tuple(m["uuid"] for m in d.get("migDevices") or [] if m.get("uuid")),
            mig_enabled=mig.get("current") == 1,
            memory_total=memory.get("total"),
            memory_used=memory.get("used"),
            compute_mode=d.get("computeMode"),
            processes=None if d.get("processes") is None else len(d["processes"]),
        ))
    return report


# -- the check -------------------------------------------------------------------------
@dataclass(frozen=True)
class AllocatedGpu:
    device: str  # driver/pool/device
    uuid: str | None
    pci_bus_id: str | None


def allocated_gpus(claims: list[Obj], published: dict[tuple[str, str, str], dict], profile: DriverProfile) -> list[AllocatedGpu]:
    """The slice ``uuid`` (and PCI bus ID) of every device the claims hold."""
    out = []
    for claim in claims:
        for dev in allocated_devices(claim):
            entry = published.get(dev.key)
            device = entry["device"] if entry else {}
            pci = profile.device_attribute(device, "pciBusID") if "pciBusID" in profile.attributes else None
            out.append(AllocatedGpu(str(dev), profile.device_attribute(device, "uuid"), normal_pci(pci)))
    return out


def compare(report: ProbeReport, allocated: list[AllocatedGpu]) -> list[str]:
    """Every way the container's view differs from its claims (empty: it sees exactly what it holds)."""
    if report.error:
        return [f"NVML failed in the pod ({report.error}); allocated {', '.join(sorted(a.uuid or a.device for a in allocated)) or 'nothing'}"]
    problems = []
    unknown = [a.device for a in allocated if not a.uuid]
    if unknown:
        problems.append(f"allocated devices without a published uuid attribute: {', '.join(unknown)}")
    expected = {a.uuid for a in allocated if a.uuid}
    seen = report.units
    for uuid in sorted(seen - expected):
        problems.append(f"the container sees {uuid}, which its claims do not hold")
    for uuid in sorted(expected - seen):
        problems.append(f"the container does not see {uuid}, which its claims hold")
    by_uuid = {g.uuid: g for g in report.gpus}
    for a in allocated:
        g = by_uuid.get(a.uuid or "")
        if g and a.pci_bus_id and g.pci_bus_id and a.pci_bus_id != g.pci_bus_id:
            problems.append(f"{a.uuid}: slice says PCI {a.pci_bus_id}, NVML says {g.pci_bus_id}")
    return problems


def _cuda(version: object) -> str | None:
    """NVML's CUDA driver version (12040) or a published one ("12.4.0", "12.4") as "12.4"."""
    if isinstance(version, int):
        return f"{version // 1000}.{version % 1000 // 10}"
    parts = str(version or "").split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 and all(p.isdigit() for p in parts[:2]) else None


def version_problems(report: ProbeReport, devices: list[Obj], profile: DriverProfile) -> list[str]:
    """Where the versions the slice publishes for the allocated ``devices`` differ from what NVML reports in the
    container: the driver (``driverVersion``) and the CUDA driver API (``cudaDriverVersion``, major.minor).
    A device that publishes neither gives a problem too: the slice advertises nothing to compare."""
    nvml = report.raw.get("nvml") or {}
    problems = []
    for device in devices:
        name = device.get("name", "?")
        published = profile.device_attribute(device, "driverVersion") if "driverVersion" in profile.attributes else None
        cuda = profile.device_attribute(device, "cudaDriverVersion") if "cudaDriverVersion" in profile.attributes else None
        if published is None and cuda is None:
            problems.append(f"{name} publishes no driverVersion or cudaDriverVersion attribute")
        if published is not None and str(published) != str(nvml.get("driverVersion")):
            problems.append(f"{name}: the slice says driver {published}, NVML in the container says {nvml.get('driverVersion')}")
        if cuda is not None and _cuda(cuda) != _cuda(nvml.get("cudaDriverVersion")):
            problems.append(f"{name}: the slice says CUDA driver {cuda}, NVML in the container says "
                            f"{_cuda(nvml.get('cudaDriverVersion'))}")
    return problems

# -- running it ----------------------------------------------------------------------------
def _finished(p: Obj) -> bool:
    return p.get("status", {}).get("phase") in ("Succeeded", "Failed")


def _reported(p: Obj, held: bool) -> bool:
    """Finished, or (a held probe, whose readiness is its report) ready. A pod without a readiness probe is
    Ready as soon as it runs: only a held one's Ready says the report is written."""
    conditions = p.get("status", {}).get("conditions") or []
    return _finished(p) or (held and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions))


def output_of(kube, namespace: str, name: str) -> str:
    """The probe's log, or its termination message when the log is gone (e.g. rotated)."""
    try:
        log = kube.raw(f"/api/v1/namespaces/{namespace}/pods/{name}/log?container=probe", timeout=30)
    except Exception:  # noqa: BLE001 - any failure to read logs falls back to the termination message
        log = ""
    if MARKER in log:
        return log
    pod_obj = kube.get(rest.PODS, name, namespace)
    for status in pod_obj.get("status", {}).get("containerStatuses") or []:
        message = (status.get("state", {}).get("terminated") or {}).get("message")
        if message:
            return message
    return log


def run(kube, namespace: str, body: Obj, timeout: float = 300.0) -> tuple[ProbeReport, Obj, list[Obj]]:
    """Create the probe pod, wait until it has reported (finished; a held pod: ready), image pull included;
    return its report, pod and claims. The claims are read when the pod is bound (allocated then): a pod's
    generated claims are deleted once it has finished, with what they held. A held pod is the caller's to delete."""
    name = body["metadata"]["name"]
    held = any("readinessProbe" in c for c in body["spec"]["containers"])
    claims: dict[str, Obj] = {}

    def finished(p: Obj) -> bool:
        if not claims and p.get("spec", {}).get("nodeName"):
            try:
                claims.update(pod_claims(kube, p))
            except rest.NotFound:
                pass  # gone already: the comparison then says nothing was allocated
        return _reported(p, held)

    kube.create(rest.PODS, body, namespace)
    deadline = time.monotonic() + timeout
    while True:  # in slices: a driver's refusal shows only in events, which the pod's watch does not see
        step = min(REFUSAL_LOOK_S, deadline - time.monotonic())
        try:
            done = wait_for_object(
                kube, rest.PODS, name, finished, step, f"NVML probe pod {namespace}/{name} to report", namespace=namespace,
                why=pending_reason(kube, namespace, name),  # the scheduler's verdict and the pod's warning events (e.g. a failed prepare)
            )
            break
        except WaitTimeout as e:
            if refusal := config_refusal(events_for(kube, namespace, name)):
                raise NotEstablished(f"the driver does not accept the claim's config on this cluster: {refusal}") from e
            if time.monotonic() + 1 >= deadline:
                raise WaitTimeout(e.what, timeout, e.last, e.why) from None
    return parse(output_of(kube, namespace, name)), done, list(claims.values())


#: How often a probe's wait looks at the pod's events for a driver that refuses its config.
REFUSAL_LOOK_S = 20.0


def config_refusal(events: list[Obj]) -> str | None:
    """The message of a failed prepare that says the driver does not offer the claim's configuration, or None."""
    for e in events:
        if e.get("type") == "Warning" and e.get("reason") == "FailedPrepareDynamicResources" and GATE_OFF.search(e.get("message") or ""):
            return str(e["message"])
    return None
