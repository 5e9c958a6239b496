"""The offline CEL agrees with the API server and kube-scheduler on every selector of a corpus.

``diagnose`` and ``lint`` say which devices a selector matches by evaluating it here; a
check that accepts what Kubernetes rejects (``memory >= quantity("64Gi")``) is wrong
evidence. Each selector of ``fixtures/cel/corpus.yaml`` is written to a real API server
(a DeviceClass, server-side dry run): accepted or rejected, and the offline type check must
say the same, in the same words. Each accepted one is then asked of kube-scheduler (a pod
whose claim selects one device with it): allocated or not, as the offline evaluation over the
cluster's slices predicts. Negative control: without the offline type check, the corpus's
quantity comparisons are disagreements, and the test's comparison finds them.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from dra_harness.checks import cel, celtypes
from dra_harness.kube import builders, rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.waits import watch_until

pytestmark = pytest.mark.cluster
CORPUS = yaml.safe_load((Path(__file__).resolve().parents[2] / "fixtures" / "cel" / "corpus.yaml").read_text())
DRIVER = "gpu.example.com"


def _server_verdict(kube: Kube, expression: str) -> str:
    """"" when the API server accepts a DeviceClass with this selector, else its message."""
    body = {"apiVersion": rest.DEVICE_CLASSES.api_version, "kind": "DeviceClass",
            "metadata": {"name": f"cel-{uuid.uuid4().hex[:8]}"}, "spec": {"selectors": [builders.cel(expression)]}}
    try:
        kube.request("POST", rest.DEVICE_CLASSES.path(), body, params={"dryRun": "All"})
    except rest.ApiError as e:
        assert e.status == 422, e
        return e.message
    return ""


def _disagreements(kube: Kube) -> list[str]:
    out = []
    for expression in CORPUS:
        server, offline = _server_verdict(kube, expression), cel.rejection(expression)
        if bool(server) != bool(offline) or offline not in server:
            out.append(f"{expression}: API server {'rejects: ' + server if server else 'accepts'}; "
                       f"offline {'rejects: ' + offline if offline else 'accepts'}")
    return out


def _allocated(kube: Kube, ns: str, run_id: str, expression: str) -> bool:
    """Whether kube-scheduler allocates one device of the example driver selected by ``expression``."""
    name = f"p{uuid.uuid4().hex[:6]}"
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, builders.claim_template(
        name, run_id, [builders.exactly("gpu", DRIVER, 1, selectors=[expression])]), ns)
    kube.create(rest.PODS, builders.pod(name, run_id, claims={"gpu": {"template": name}}), ns)
    def decided(p: dict) -> bool:  # placed, or the scheduler said why not (Unschedulable, or an error such as CEL's)
        return bool(p["spec"].get("nodeName")) or any(
            c.get("type") == "PodScheduled" and c.get("status") == "False" for c in p.get("status", {}).get("conditions", []))

    pods = watch_until(kube, rest.PODS, lambda ps: any(decided(p) for p in ps), 60,
                       f"pod {ns}/{name} scheduled or unschedulable", namespace=ns, field_selector=f"metadata.name={name}")
    kube.delete(rest.PODS, name, ns, grace_seconds=0)
    # The next pod's verdict must not depend on this one's device: 20 selectors, 4 devices, and the claim
    # controller frees a device only once it has seen the pod go (seconds on a loaded machine).
    watch_until(kube, rest.RESOURCE_CLAIMS, lambda claims: not claims, 60, f"pod {ns}/{name}'s claim to be removed",
                namespace=ns)
    return bool(pods[0]["spec"].get("nodeName"))


def test_the_offline_cel_judges_every_selector_of_the_corpus_as_the_api_server_and_scheduler_do(small_cluster, monkeypatch):
    kube = small_cluster.kube()
    assert _disagreements(kube) == []

    devices = [d for s in kube.list(rest.RESOURCE_SLICES) if s["spec"]["driver"] == DRIVER for d in s["spec"].get("devices") or []]
    assert devices, "the cluster publishes no device of the example driver"
    run_id = f"cel{uuid.uuid4().hex[:5]}"
    ns = f"cel-{run_id}"
    kube.create(rest.NAMESPACES, {"metadata": {"name": ns}})
    try:
        wrong = []
        for expression in (e for e in CORPUS if not cel.rejection(e)):
            predicted = any(cel.evaluate(expression, DRIVER, d).matched for d in devices)
            if _allocated(kube, ns, run_id, expression) != predicted:
                wrong.append(f"{expression}: offline says {'a device matches' if predicted else 'none matches'}")
        assert wrong == []
    finally:
        kube.delete(rest.NAMESPACES, ns)

    # Negative control: an offline CEL without the type check (cel-python alone) disagrees, and is caught.
    cel._compiled.cache_clear()
    monkeypatch.setattr(celtypes, "check", lambda tree: "dyn")
    try:
        found = _disagreements(kube)
    finally:
        cel._compiled.cache_clear()
    assert any("memory >= quantity('64Gi'): API server rejects" in d for d in found), found
