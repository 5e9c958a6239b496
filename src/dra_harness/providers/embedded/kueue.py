"""Kueue beside the embedded cluster, installed from its own release manifests, run as a process.

Why Kueue: kube-scheduler does not preempt pods to free DRA devices, so a team that needs
priority to free devices puts a queue in front of the scheduler; Kueue is the one the DRA KEP
and the example driver's docs name, and it counts DRA devices against quota
(``resources.deviceClassMappings``, behind its ``DynamicResourceAllocation`` gate).

Why a process: every component of the embedded cluster is one, and no registry serves an
image here. What the release installs comes from the Kueue module at the version we build:
its CRDs with their conversion webhooks and its webhook configurations, unchanged except for
where the webhooks are reached (a Service in the release; ``https://127.0.0.1:<port>`` here,
with a serving certificate from the cluster's CA, since Kueue's own certificate management
writes for a Service name the API server cannot reach here). Only the webhooks of what we
enable are registered (Kueue's kinds and ``batch/v1`` Jobs): the others would intercept
every pod and Deployment of the cluster for integrations that are off, and fail closed.
"""

from __future__ import annotations

import base64
import logging
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.components.gomod import module_source
from dra_harness.errors import ClusterError
from dra_harness.kube import rest
from dra_harness.kube.kueue_api import METRICS_READER, NAMESPACE, OBJECTS
from dra_harness.kube.rest import Kube
from dra_harness.kube.waits import WaitTimeout, wait_for_deletion, watch_until
from dra_harness.providers.embedded import ports as port_registry
from dra_harness.providers.embedded.core import ClusterCore
from dra_harness.providers.embedded.pki import PKI
from dra_harness.retrying import NotYet, until, wait_answers

log = logging.getLogger(__name__)

PROCESS = "kueue"
#: The release's webhooks we register: Kueue's own kinds and the Job integration we enable.
WEBHOOK_GROUPS = ("kueue.x-k8s.io", "batch")
CRDS = rest.Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
MUTATING = rest.Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                         "MutatingWebhookConfiguration", False)
VALIDATING = rest.VALIDATING_WEBHOOK_CONFIGURATIONS
WEBHOOK_CONFIGS = {"MutatingWebhookConfiguration": MUTATING, "ValidatingWebhookConfiguration": VALIDATING}
READY_DEADLINE_S = 120.0
#: How long a stop waits for the API server to finish removing Kueue's CRDs (its ``customresourcecleanup``
#: finalizer lists and deletes each kind's objects: about a second here, nudged); a start waits as long
#: for CRDs of an earlier run still being removed.
CRD_REMOVAL_DEADLINE_S = 120.0
#: How long the namespace an earlier Kueue's stop is deleting may take to go (the namespace controller: seconds).
NAMESPACE_GONE_S = 60.0
#: A CRD still there this long after its deletion is touched (``NUDGE_ANNOTATION``), see ``_wait_crds_removed``.
CRD_NUDGE_AFTER_S = 3.0
NUDGE_ANNOTATION = "dra-harness.io/removal-nudge"
METRICS_CERTS = "/etc/kueue/metrics/certs"


RELEASE_DEADLINE_S = 30.0


@dataclass(frozen=True)
class Kueue:
    """A running Kueue: where its webhooks and probes listen, and what it registered."""

    webhook_port: int
    health_port: int
    metrics_port: int
    directory: Path
    crds: tuple[str, ...]
    webhook_configs: tuple[tuple[str, str], ...]  # (kind, name)
    namespace_created: bool = False


def _source() -> Path:
    return module_source(catalog.KUEUE) / "config" / "components"


def configuration(webhook_port: int, health_port: int, metrics_port: int, cert_dir: Path,
                  device_class_mappings: dict[str, list[str]], source: Path | None = None) -> dict:
    """Kueue's Configuration: the release's (its client QPS and burst, its controllers' concurrency), but
    listening on loopback only (metrics over TLS with the API server's authentication, as the release
    serves them), no leader election (one replica), certificates from us, the Job integration only, and
    the DRA device mappings."""
    release = yaml.safe_load(((source or _source()) / "manager" / "controller_manager_config.yaml").read_text())
    return release | {
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": ["batch/job"]},
        "resources": {"deviceClassMappings": [{"name": name, "deviceClassNames": classes}
                                              for name, classes in device_class_mappings.items()]},
    }


def _crds(source: Path, url: str, ca_bundle: str) -> list[dict]:
    """The release's CRDs, with the conversion webhook its kustomization patches in where it does."""
    kustomization = yaml.safe_load((source / "crd" / "kustomization.yaml").read_text())
    patches = [source / "crd" / p["path"] for p in kustomization.get("patches") or [] if "webhook_in_" in p.get("path", "")]
    patched = {yaml.safe_load(p.read_text())["metadata"]["name"] for p in patches}
    out = []
    for path in sorted((source / "crd" / "bases").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if crd["metadata"]["name"] in patched:
            crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": f"{url}/convert", "caBundle": ca_bundle}, "conversionReviewVersions": ["v1"]}}
        out.append(crd)
    return out


def _webhook_configs(source: Path, url: str, ca_bundle: str) -> list[dict]:
    """The release's webhook configurations, reached at ``url``, for :data:`WEBHOOK_GROUPS` only."""
    out = []
    for doc in yaml.safe_load_all((source / "webhook" / "manifests.yaml").read_text()):
        if not doc:
            continue
        hooks = [h for h in doc["webhooks"] if set(h["rules"][0]["apiGroups"]) <= set(WEBHOOK_GROUPS)]
        for h in hooks:
            h["clientConfig"] = {"url": url + h["clientConfig"]["service"]["path"], "caBundle": ca_bundle}
        doc["metadata"]["name"] = f"kueue-{doc['metadata']['name']}"
        doc["webhooks"] = hooks
        out.append(doc)
    return out


def start(cluster: ClusterCore, kube: Kube, device_class_mappings: dict[str, list[str]], dra: bool = True) -> Kueue:
    """Install Kueue's CRDs and webhooks on ``cluster`` and start it; returns once its webhooks answer.
    ``dra`` False leaves Kueue's DynamicResourceAllocation gate off: devices are then not counted."""
    st = cluster.state()
    if st is None:
        raise ClusterError(f"cluster {cluster.name!r} is not up")
    binary = builder.build_all([catalog.KUEUE])[catalog.KUEUE.dirname].binary("kueue")
    source = _source()
    directory = cluster.state_dir / "kueue"
    certs = directory / "certs"
    certs.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)
    serving = PKI(cluster.state_dir / "pki").load().issue("kueue-webhook", "kueue-webhook", hosts=("127.0.0.1",), client=False)
    (certs / "tls.crt").write_bytes(serving.cert.read_bytes())
    (certs / "tls.key").write_bytes(serving.key.read_bytes())
    (certs / "tls.key").chmod(0o600)
    ca_bundle = base64.b64encode((cluster.state_dir / "pki" / "ca.crt").read_bytes()).decode()
    ports = port_registry.take(["webhook", "health", "metrics"])
    webhook_port, health_port = ports["webhook"], ports["health"]
    url = f"https://127.0.0.1:{webhook_port}"
    config = directory / "config.yaml"
    config.write_text(yaml.safe_dump(configuration(webhook_port, health_port, ports["metrics"], certs, device_class_mappings, source)))

    namespace_created = _own_namespace(kube)
    _grant_metrics_reader(kube)
    crds = _crds(source, url, ca_bundle)
    names = {c["metadata"]["name"] for c in crds}
    # An earlier Kueue's CRDs may still be on their way out (or left by a killed run): finish that first.
    if stale := names & {c["metadata"]["name"] for c in kube.list(CRDS)}:
        for name in stale:
            kube.delete(CRDS, name)
        _wait_crds_removed(kube, stale, f"{len(stale)} CRDs of an earlier Kueue to be removed")
    for crd in crds:
        kube.create(CRDS, crd)
    watch_until(kube, CRDS, lambda items: names <= {c["metadata"]["name"] for c in items if _established(c)},
                READY_DEADLINE_S, f"Kueue's {len(names)} CRDs to be established")
    _wait_discovered(kube, crds, time.monotonic() + READY_DEADLINE_S)
    argv = [str(binary), f"--config={config}", f"--kubeconfig={cluster.kubeconfig}",
            f"--feature-gates=DynamicResourceAllocation={str(dra).lower()},VisibilityOnDemand=false"]
    cluster.supervisor.start(PROCESS, _with_metrics_certs(argv, directory, certs))
    _wait_ready(cluster, health_port, time.monotonic() + READY_DEADLINE_S)
    configs = _webhook_configs(source, url, ca_bundle)
    for doc in configs:
        kube.create(WEBHOOK_CONFIGS[doc["kind"]], doc)
    return Kueue(webhook_port, health_port, ports["metrics"], directory, tuple(c["metadata"]["name"] for c in crds),
                 tuple((d["kind"], d["metadata"]["name"]) for d in configs), namespace_created)


def _grant_metrics_reader(kube: Kube) -> None:
    """:data:`METRICS_READER` and its binding to ``system:monitoring`` (get on /metrics and the health paths only)."""
    for res, body, ns in (
            (rest.SERVICE_ACCOUNTS, {"metadata": {"name": METRICS_READER}}, NAMESPACE),
            (rest.CLUSTER_ROLE_BINDINGS, {"metadata": {"name": METRICS_READER},
                                          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                      "name": "system:monitoring"},
                                          "subjects": [{"kind": "ServiceAccount", "name": METRICS_READER,
                                                        "namespace": NAMESPACE}]}, None)):
        try:
            kube.create(res, body, ns)
        except rest.Conflict:
            pass  # left by a killed run: the same grant


def _established(crd: dict) -> bool:
    return any(c["type"] == "Established" and c["status"] == "True" for c in (crd.get("status") or {}).get("conditions") or [])


def _wait_discovered(kube: Kube, crds: list[dict], deadline: float) -> None:
    """Until discovery lists each CRD's kind in every version it serves. Established comes first: Kueue,
    started between the two, finds no Workload kind in its REST mapper and exits ("Unable to setup
    indexes": 1 start in 9 on a loaded machine here)."""
    wanted: dict[str, set[str]] = {}
    for crd in crds:
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                wanted.setdefault(f"{crd['spec']['group']}/{version['name']}", set()).add(crd["spec"]["names"]["plural"])

    def discovered() -> None:
        for group_version, plurals in sorted(wanted.items()):
            try:
                listing = kube.request("GET", f"/apis/{group_version}")
            except rest.NotFound:
                raise NotYet(f"discovery does not list {group_version} yet") from None
            if missing := plurals - {r.get("name") for r in listing.get("resources", [])}:
                raise NotYet(f"discovery does not list {', '.join(sorted(missing))} in {group_version} yet")

    try:
        until(deadline, 0.2, log, "discovery to list Kueue's kinds")(discovered)
    except NotYet as e:
        raise ClusterError(f"Kueue's CRDs are established but {e} (after {READY_DEADLINE_S:.0f} s)") from None


def _with_metrics_certs(argv: list[str], directory: Path, certs: Path) -> list[str]:
    """``argv`` run where ``/etc/kueue/metrics/certs`` holds our certificate. Kueue reads its metrics
    certificate from that fixed path when it does not manage its own; rather than write into the host's
    /etc, the process gets a private mount namespace with an overlay on /etc that only it sees."""
    upper, work = directory / "etc-upper", directory / "etc-work"
    for d in (upper, work):
        d.mkdir(exist_ok=True, mode=0o700)
    script = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={shlex.quote(str(upper))},workdir={shlex.quote(str(work))} /etc"
              f" && mkdir -p {METRICS_CERTS} && cp {shlex.quote(str(certs))}/tls.crt {shlex.quote(str(certs))}/tls.key {METRICS_CERTS}/"
              f" && exec {shlex.join(argv)}")
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]


def _wait_ready(cluster: ClusterCore, port: int, deadline: float) -> None:
    """Until Kueue's ``/readyz`` answers; a timeout says whether Kueue still runs, and how its log ends."""
    def answers() -> None:
        if (code := cluster.supervisor.exited(PROCESS)) is not None:
            raise ClusterError(f"Kueue exited with status {code} before it was ready; its log ends:\n"
                               f"{cluster.supervisor.log_tail(PROCESS, 40)}")
        wait_answers(f"http://127.0.0.1:{port}/readyz", time.monotonic(), 0, log, "Kueue to be ready")  # one try

    try:
        until(deadline, 0.5, log, "Kueue to be ready")(answers)
    except NotYet as e:
        raise ClusterError(f"{e} (still running); its log ends:\n{cluster.supervisor.log_tail(PROCESS, 40)}") from None


def stop(cluster: ClusterCore, kube: Kube, kueue: Kueue) -> None:
    """Kueue's objects first, while Kueue runs (it holds finalizers on them until it has let go); then
    the webhooks (they fail closed), the process, and its CRDs."""
    _release_objects(kube)
    for kind, name in kueue.webhook_configs:
        kube.delete(WEBHOOK_CONFIGS[kind], name)
    cluster.supervisor.stop(PROCESS, grace=10)
    kube.delete(rest.CLUSTER_ROLE_BINDINGS, METRICS_READER)
    if not kueue.namespace_created:
        kube.delete(rest.SERVICE_ACCOUNTS, METRICS_READER, NAMESPACE)
    for name in kueue.crds:
        kube.delete(CRDS, name)
    try:
        _wait_crds_removed(kube, set(kueue.crds), f"Kueue's {len(kueue.crds)} CRDs to be removed")
    except WaitTimeout as e:
        # Deletion is requested and the API server finishes it on its own; the next start waits for it.
        log.warning("%s; the API server is still removing them", e)
    if kueue.namespace_created:
        kube.delete(rest.NAMESPACES, NAMESPACE)


def _own_namespace(kube: Kube) -> bool:
    """Kueue's namespace, created now (True) or already there and kept (False). One that an earlier stop is deleting
    is waited out first: created into while it terminates, every write there is refused ("unable to create new
    content in namespace kueue-system because it is being terminated"; the queue design's probes stop and start
    Kueue back to back, and `contention size` exited 2 on it)."""
    try:
        kube.create(rest.NAMESPACES, {"metadata": {"name": NAMESPACE}})
        return True
    except rest.Conflict:
        if not kube.get(rest.NAMESPACES, NAMESPACE)["metadata"].get("deletionTimestamp"):
            return False
    wait_for_deletion(kube, rest.NAMESPACES, NAMESPACE, NAMESPACE_GONE_S)
    kube.create(rest.NAMESPACES, {"metadata": {"name": NAMESPACE}})
    return True


def _wait_crds_removed(kube: Kube, names: set[str], what: str) -> None:
    """Until none of ``names`` is left, nudging those still there every few seconds.

    Why the nudge: the API server's CRD finalizer lists a CRD's objects through a watch cache it creates
    at that moment (Kueue never reads some of its kinds), so its first list fails ("storage is
    (re)initializing"); the retry, working from a copy of the CRD that predates the failure's status
    update, meets a conflict and drops the CRD to wait for an update event, and its event handler ignores
    that very update (only the Terminating condition changed). The CRD then waits for the informer's
    5-minute resync: the stalls of about 300 s the CI saw. Any other change queues it again: an annotation.
    """
    def left(items: list[dict]) -> set[str]:
        return names & {c["metadata"]["name"] for c in items}

    deadline = time.monotonic() + CRD_REMOVAL_DEADLINE_S
    nudges = 0
    while True:
        remaining = deadline - time.monotonic()
        try:
            watch_until(kube, CRDS, lambda items: not left(items), max(0.0, min(CRD_NUDGE_AFTER_S, remaining)), what)
            return
        except WaitTimeout as e:
            stuck = left(e.last if isinstance(e.last, list) else [])
            if remaining <= CRD_NUDGE_AFTER_S:
                raise WaitTimeout(what, CRD_REMOVAL_DEADLINE_S, e.last,
                                  f"{', '.join(sorted(stuck))} still there after {nudges} nudges") from None
        for name in stuck:
            nudges += 1
            try:
                kube.patch(CRDS, name, {"metadata": {"annotations": {NUDGE_ANNOTATION: str(nudges)}}})
            except rest.NotFound:
                pass
        log.info("nudged %d CRDs still being removed: %s", len(stuck), ", ".join(sorted(stuck)))


def _release_objects(kube: Kube) -> None:
    """Delete every Kueue object and wait for Kueue to drop its finalizers; strip those still held at the deadline
    (a workload whose Job is already gone, say), so that deleting the CRDs never hangs on them."""
    def left() -> list[tuple[rest.Resource, dict]]:
        return [(res, o) for res in OBJECTS for o in kube.list(res)]

    for res, obj in left():
        kube.delete(res, obj["metadata"]["name"], obj["metadata"].get("namespace"))
    deadline = time.monotonic() + RELEASE_DEADLINE_S
    while (remaining := left()) and time.monotonic() < deadline:
        time.sleep(0.5)
    for res, obj in remaining:
        log.warning("Kueue kept %s %s past %.0f s; removing its finalizers", res.kind, obj["metadata"]["name"], RELEASE_DEADLINE_S)
        try:
            kube.patch(res, obj["metadata"]["name"], {"metadata": {"finalizers": None}}, obj["metadata"].get("namespace"))
        except rest.NotFound:
            pass
