"""Canaries for an upgrade the harness cannot perform itself: a staging cluster's own.

``start`` leaves a labelled namespace of long-running pods holding claims (one from a template,
one claim shared by two pods, one claim of two devices) and records their allocations and
container IDs in a run directory; the user upgrades the cluster; ``verify`` checks the invariants
of :mod:`~dra_harness.upgrade.snapshot` against that record, and that a new claim still
allocates; ``stop`` deletes the namespace. Only the namespace the canary created is ever touched,
and it carries the run label, so ``cluster``-wide sweeps of the harness find it too. The record is a
file anyone can edit, so ``stop`` deletes the namespace it names only while that namespace carries
the record's run label and the canary label, and only that very namespace (a uid precondition): a
record pointing at ``kube-system`` is refused, not obeyed.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dra_harness.errors import HarnessError, InputError, Refused
from dra_harness.kube import builders, rest
from dra_harness.kube.client import connect
from dra_harness.kube.pods import wait_running
from dra_harness.kube.rest import Kube
from dra_harness.kube.waits import wait_for_deletion
from dra_harness.labels import CANARY_LABEL, RUN_LABEL
from dra_harness.upgrade import snapshot, workloads

STATE = "canary.json"
VERIFIED = "canary-verify.json"


class CanaryError(InputError):
    """A canary run directory that is missing, not a canary's, or unreadable (one line)."""


class CanaryRefused(Refused):
    """The namespace a canary record names is not that canary's: it is left alone, and so is the record."""


#: pod -> the claims its containers use: from the template, shared by two, two devices in one claim.
PODS: dict[str, dict[str, dict[str, str]]] = {
    "template-0": {"gpu": {"template": "one-gpu"}}, "shared-0": {"gpu": {"claim": "shared"}},
    "shared-1": {"gpu": {"claim": "shared"}}, "pair-0": {"gpu": {"claim": "pair"}},
}


def start(kubeconfig: Path | None, context: str | None, run_dir: Path, device_class: str, image: str) -> dict:
    """Create the canaries, wait until they run, record them in ``run_dir/canary.json``."""
    if (run_dir / STATE).exists():
        raise CanaryError(f"{run_dir / STATE} exists: this directory holds a canary already (`canary stop` it first)")
    kube = connect(kubeconfig, context)
    run_id = uuid.uuid4().hex[:12]
    namespace = f"dra-canary-{run_id}"
    labels = {RUN_LABEL: run_id, CANARY_LABEL: "true"}
    record: dict[str, Any] = {"run_id": run_id, "namespace": namespace, "kubeconfig": str(kubeconfig) if kubeconfig else None,
              "context": context, "device_class": device_class, "image": image, "started": time.time(), "snapshot": None}
    # Recorded before anything is created: a start killed part-way (even kill -9) can still be stopped.
    run_dir.mkdir(parents=True, exist_ok=True)
    _write(run_dir, record)
    try:
        kube.create(rest.NAMESPACES, {"metadata": {"name": namespace, "labels": labels}})
        kube.create(rest.RESOURCE_CLAIM_TEMPLATES,
                    builders.claim_template("one-gpu", run_id, [workloads.request(1, device_class)]), namespace)
        for claim, count in (("shared", 1), ("pair", 2)):
            kube.create(rest.RESOURCE_CLAIMS, builders.claim(claim, run_id, [workloads.request(count, device_class)]), namespace)
        for name, refs in PODS.items():
            kube.create(rest.PODS, builders.pod(name, run_id, claims=refs, image=image), namespace)
        for name in PODS:
            wait_running(kube, namespace, name, workloads.RUNNING_DEADLINE_S)
        taken = snapshot.take(kube, namespace, {})
    except BaseException:
        _delete(kube, namespace, run_id)
        (run_dir / STATE).unlink(missing_ok=True)
        raise
    record["snapshot"] = asdict(taken)
    _write(run_dir, record)
    return record


def _write(run_dir: Path, record: dict) -> None:
    tmp = run_dir / f".{STATE}.tmp"
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(run_dir / STATE)


def load(run_dir: Path, started: bool = True) -> dict:
    """The canary record of ``run_dir``; with ``started``, only one whose start finished (it has a snapshot)."""
    try:
        record = json.loads((run_dir / STATE).read_text())
        if not (isinstance(record["run_id"], str) and record["run_id"] and isinstance(record["namespace"], str)):
            raise TypeError("run_id and namespace must be strings")
        if record["snapshot"] is not None:
            record["snapshot"] = snapshot.Snapshot(**record["snapshot"])
        elif started:
            raise CanaryError(f"{run_dir / STATE}: `canary start` did not finish (interrupted or killed); "
                              f"`dra-harness canary stop {run_dir}` removes what it created")
        return record
    except FileNotFoundError:
        raise CanaryError(f"{run_dir}: no {STATE}; start a canary with `dra-harness canary start --run-dir {run_dir}`") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CanaryError(f"{run_dir / STATE}: not a canary record ({e.__class__.__name__}: {e})") from None


def _kube(record: dict, kubeconfig: Path | None) -> Kube:
    return connect(kubeconfig or record["kubeconfig"], record["context"])


def verify(run_dir: Path, kubeconfig: Path | None = None) -> dict:
    """Compare the canaries with their record and allocate a new claim; writes and returns ``canary-verify.json``."""
    record = load(run_dir)
    kube = _kube(record, kubeconfig)
    now = snapshot.take(kube, record["namespace"], {})
    broken = snapshot.differences(record["snapshot"], now)
    broken["allocates"] = []
    try:
        took = workloads.probe(kube, record["run_id"], record["namespace"], f"probe-{uuid.uuid4().hex[:6]}",
                               image=record["image"])
    except HarnessError as e:
        took = None
        broken["allocates"].append(f"a new claim's pod did not run: {e}")
    result = {"namespace": record["namespace"], "started": record["started"], "verified": time.time(),
              "new_claim_pod_ran_after_s": None if took is None else round(took, 3),
              "held": not any(broken.values()),
              "invariants": [{"name": k, "held": not v, "breaches": v} for k, v in broken.items() if k != "prepared"],
              "not_established": {"prepared": "the canary cannot read a node's CDI specs on a cluster it did not build"}}
    (run_dir / VERIFIED).write_text(json.dumps(result, indent=2))
    return result


def stop(run_dir: Path, kubeconfig: Path | None = None) -> str:
    """Delete the canaries' namespace and wait until it is gone (a start that did not finish too); the record goes last.

    :class:`CanaryRefused` when the namespace is not this canary's (see the module's docstring): nothing is deleted.
    """
    record = load(run_dir, started=False)
    kube = _kube(record, kubeconfig)
    _delete(kube, record["namespace"], record["run_id"])
    (run_dir / STATE).unlink()
    return record["namespace"]


def _delete(kube: Kube, namespace: str, run_id: str) -> None:
    """Delete ``namespace`` if it carries the canary's labels for ``run_id``; gone already is fine."""
    try:
        ns = kube.get(rest.NAMESPACES, namespace)
    except rest.NotFound:
        return
    labels = ns["metadata"].get("labels") or {}
    if labels.get(RUN_LABEL) != run_id or labels.get(CANARY_LABEL) != "true":
        raise CanaryRefused(
            f"namespace {namespace} is not canary {run_id}'s (it has {RUN_LABEL}={labels.get(RUN_LABEL) or '(none)'}, "
            f"{CANARY_LABEL}={labels.get(CANARY_LABEL) or '(none)'}): refusing to delete it; the record stays")
    # The uid precondition: a namespace deleted and re-created under this name since the check is not deleted.
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background",
            "preconditions": {"uid": ns["metadata"]["uid"]}}
    try:
        kube.request("DELETE", rest.NAMESPACES.path(None, namespace), body)
    except rest.NotFound:
        return
    except rest.Conflict:
        raise CanaryRefused(f"namespace {namespace} was replaced while being checked (another uid): refusing to "
                            "delete it; the record stays") from None
    wait_for_deletion(kube, rest.NAMESPACES, namespace, 180)
