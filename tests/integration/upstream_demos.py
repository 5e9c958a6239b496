"""The example driver's own demos (``demo/examples`` of its v0.4.0 module) and the assertions its e2e makes of them.

Shared by the by-hand tests on the embedded cluster and on kind. A demo is applied verbatim but for its
image: ``ubuntu:22.04``, which no node here can pull, becomes our workload image, whose ``bash`` hands
``-c "export; trap ...; sleep 9999 & wait"`` to busybox's sh. Containers then print their environment
as ``export NAME='value'`` where bash prints ``declare -x NAME="value"``; :func:`env` reads both.
Each check mirrors one of upstream's ``verify*`` helpers (``test/e2e/e2e_setup_test.go``) and raises
AssertionError with what it saw.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from dra_harness.components import catalog
from dra_harness.components.gomod import module_source
from dra_harness.components.images import WORKLOAD_IMAGE
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj

UPSTREAM_IMAGE = "ubuntu:22.04"
_LINE = re.compile(r"""^(?:export|declare -x) ([A-Z0-9_]+)=['"]?(.*?)['"]?$""")


def manifest(demo: str, name: str | None = None) -> str:
    """The demo's manifest text with only its image replaced."""
    path = module_source(catalog.EXAMPLE_DRIVER) / "demo" / "examples" / demo / f"{name or demo}.yaml"
    return path.read_text().replace(UPSTREAM_IMAGE, WORKLOAD_IMAGE)


def kubectl(binary: str | Path, kubeconfig: Path, *args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout)


def env(log: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for line in log.splitlines() if (m := _LINE.match(line.strip()))}


def gpus(variables: dict[str, str]) -> list[str]:
    """Devices a container was given: ``GPU_DEVICE_<ID>=gpu-...`` (not the ``_<PROPERTY>`` siblings)."""
    return sorted(v for k, v in variables.items()
                  if v.startswith("gpu-") and k == "GPU_DEVICE_" + v[4:].upper().replace("-", "_"))


def prop(variables: dict[str, str], gpu: str, name: str) -> str:
    return variables.get(f"GPU_DEVICE_{gpu[4:].upper().replace('-', '_')}_{name}", "")


def running(kube: Kube, namespace: str, count: int, deadline_s: float = 120, only: list[str] | None = None) -> list[Obj]:
    """The namespace's ``count`` pods (or those named ``only``) once all are Running (upstream's checkPodsReadyAndRunning)."""
    end = time.monotonic() + deadline_s
    while True:
        pods = [p for p in kube.list(rest.PODS, namespace) if only is None or p["metadata"]["name"] in only]
        if len(pods) >= (count if only is None else len(only)) and all(p["status"].get("phase") == "Running" for p in pods):
            return sorted(pods, key=lambda p: p["metadata"]["name"])
        if time.monotonic() > end:
            raise AssertionError(f"{namespace}: pods not all Running in {deadline_s:.0f} s: "
                                 + "; ".join(f"{p['metadata']['name']} {p['status'].get('phase')} "
                                             f"{[c.get('message', '') for c in p['status'].get('conditions') or [] if c.get('status') == 'False']}"
                                             for p in pods))
        time.sleep(1)


def container_env(kube: Kube, namespace: str, pod: str, container: str, deadline_s: float = 30) -> dict[str, str]:
    """What the container printed with ``export``, once it has printed it."""
    end = time.monotonic() + deadline_s
    while True:
        log = kube.raw(f"/api/v1/namespaces/{namespace}/pods/{pod}/log?container={container}")
        if "KUBERNETES_SERVICE_HOST" in log or time.monotonic() > end:
            return env(log)
        time.sleep(0.5)


def claims_of(kube: Kube, namespace: str, pod: Obj) -> list[Obj]:
    """The pod's ResourceClaims: from its status (templates) or its spec (claims by name)."""
    names = [s["resourceClaimName"] for s in pod["status"].get("resourceClaimStatuses") or [] if s.get("resourceClaimName")]
    names += [c["resourceClaimName"] for c in pod["spec"].get("resourceClaims") or [] if c.get("resourceClaimName")]
    return [kube.get(rest.RESOURCE_CLAIMS, n, namespace) for n in names]


# -- upstream's verify* helpers ---------------------------------------------------------------------
def gpu_allocation(kube: Kube, namespace: str, members: list[tuple[str, str]], count: int) -> dict[str, list[str]]:
    """verifyGPUAllocation: each container sees ``count`` GPUs, and no GPU twice across them."""
    seen: dict[str, str] = {}
    out = {}
    for pod, container in members:
        got = gpus(container_env(kube, namespace, pod, container))
        assert len(got) == count, f"{namespace}/{pod}/{container} sees {got}, expected {count} GPU(s)"
        for g in got:
            assert g not in seen, f"{namespace}/{pod}/{container} sees {g}, which {seen[g]} already has"
            seen[g] = f"{pod}/{container}"
        out[f"{pod}/{container}"] = got
    return out


def shared_group(kube: Kube, namespace: str, members: list[tuple[str, str]], strategy: str, prop_name: str, value: str) -> str:
    """verifySharedGPUGroup: every member sees one and the same GPU, with the sharing strategy and property."""
    first = ""
    for pod, container in members:
        variables = container_env(kube, namespace, pod, container)
        got = gpus(variables)
        assert len(got) == 1, f"{namespace}/{pod}/{container} sees {got}, expected one shared GPU"
        first = first or got[0]
        assert got[0] == first, f"{namespace}/{pod}/{container} sees {got[0]}, the group's first member {first}"
        assert prop(variables, first, "SHARING_STRATEGY") == strategy, (pod, container, variables)
        assert prop(variables, first, prop_name) == value, (pod, container, prop_name, variables)
    return first


def device_status(kube: Kube, namespace: str, pod: Obj) -> list[str]:
    """verifyResourceClaimDeviceStatus: the pod's claims carry status.devices with uuid, model and driverVersion."""
    found = []
    for claim in claims_of(kube, namespace, pod):
        devices = claim["status"].get("devices") or []
        assert devices, f"claim {claim['metadata']['name']} has no status.devices"
        for d in devices:
            data = d.get("data") or {}
            for key, kind in (("uuid", "string"), ("model", "string"), ("driverVersion", "version")):
                assert (data.get(key) or {}).get(kind), f"claim {claim['metadata']['name']} device {d['device']}: no {key} in {data}"
            found.append(d["device"])
    assert found, f"{pod['metadata']['name']}: no claim with device status"
    return found


def consumed_capacity(kube: Kube, namespace: str, pods: list[Obj]) -> dict[str, str]:
    """verifyGPUConsumedCapacity: distinct shareIDs, memory and compute consumed, and the env says so."""
    shares: dict[str, str] = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        variables = container_env(kube, namespace, name, "ctr0")
        got = gpus(variables)
        assert got, f"{name}: no GPU in its environment"
        for claim in claims_of(kube, namespace, pod):
            for r in claim["status"]["allocation"]["devices"]["results"]:
                assert r.get("shareID"), f"{claim['metadata']['name']} {r['device']}: no shareID"
                assert shares.get(r["shareID"], name) == name, f"shareID {r['shareID']} in {shares[r['shareID']]} and {name}"
                shares[r["shareID"]] = name
                consumed = r.get("consumedCapacity") or {}
                assert all(consumed.get(k) not in (None, "0") for k in ("memory", "compute")), (name, consumed)
        assert prop(variables, got[0], "MEMORY") and prop(variables, got[0], "COMPUTE"), variables
    assert len(shares) == len(pods), shares
    return shares


def chosen_subrequest(kube: Kube, namespace: str, pod: Obj, driver: str) -> str:
    """verifyChosenSubrequest: the request (``<main>/<sub>``) the scheduler chose for the pod's claim."""
    results = [r for c in claims_of(kube, namespace, pod) for r in c["status"]["allocation"]["devices"]["results"]
               if r["driver"] == driver]
    assert len(results) == 1, results
    return str(results[0]["request"])


def net_rates(kube: Kube, namespace: str, pod: str, container: str) -> dict[str, str]:
    """verifyNetDeviceAllocation: NET_DEVICE_*_INGRESS_RATE / _EGRESS_RATE in the container."""
    rates = {k: v for k, v in container_env(kube, namespace, pod, container).items()
             if k.startswith("NET_DEVICE_") and k.endswith(("_INGRESS_RATE", "_EGRESS_RATE"))}
    assert rates, f"{namespace}/{pod}/{container}: no NET_DEVICE_*_RATE variables"
    return rates
