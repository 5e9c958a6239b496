"""Negative controls for the parity suite, on a private cluster.

- pods of a pod group that bring their own template claim instead of the group's: each gets its
  own GPU, and the group check names the group and its two claims;
- a pod asking for an extended resource no DeviceClass maps: it stays Pending with no claim made;
- without admin access, a claim for a device another pod holds waits (what admits the admin claim is admin access);
- without the driver's webhook, the invalid config the webhook check asks about is admitted (and the wait for a
  configuration to take effect ends at its deadline); with it, the webhook's server is in a network namespace of its own, and the host's only listener for it is on loopback;
- two tests' webhooks at once (xdist workers share a cluster): stopping one leaves the other answering.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dra_harness.checks import config_webhook, gang
from dra_harness.checks.sharing import group_sharing_problems
from dra_harness.errors import ClusterError
from dra_harness.kube import builders, rest
from dra_harness.kube.pods import allocated_devices, pod_claims, scheduling_message, wait_running, wait_unschedulable
from dra_harness.providers.embedded import driver_webhook


def test_pods_of_a_group_with_claims_of_their_own_are_caught_holding_two_gpus(handle):
    res = rest.served(handle.kube, "scheduling.k8s.io", "podgroups", "PodGroup", ("v1beta1", "v1alpha3"), namespaced=True)
    assert res is not None, "the embedded v1.37.2 cluster serves PodGroup"
    handle.template("controls", "one-gpu")
    handle.template("controls", "own-gpu")
    handle.kube.create(res, {"apiVersion": res.api_version, "kind": "PodGroup", "metadata": {"name": "group-1"},
                             "spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
                                      "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}},
                       "controls")
    claims: dict[str, set[str]] = {"group-1": set()}
    devices: dict[str, set[str]] = {"group-1": set()}
    for member in ("a", "b"):
        body = builders.pod(f"group-1-{member}", "controls", claims={"gpu": {"template": "own-gpu"}})  # not the group's
        body["spec"]["schedulingGroup"] = {"podGroupName": "group-1"}
        handle.kube.create(rest.PODS, body, "controls")
    for member in ("a", "b"):
        claim = pod_claims(handle.kube, wait_running(handle.kube, "controls", f"group-1-{member}"))["gpu"]
        claims["group-1"].add(claim["metadata"]["name"])
        devices["group-1"].update(str(d) for d in allocated_devices(claim))
    problems = group_sharing_problems(claims, devices)
    assert len(problems) == 2 and problems[0].startswith("group-1: its pods use claims"), problems


def test_a_pod_asking_for_an_extended_resource_no_class_maps_stays_pending(handle):
    body = builders.pod("unmapped", "controls")
    body["spec"]["containers"][0]["resources"] = {"limits": {"dra-harness.io/no-such-gpu": "1"}}
    handle.kube.create(rest.PODS, body, "controls")
    pod = wait_unschedulable(handle.kube, "controls", "unmapped", timeout=60)
    assert "Insufficient dra-harness.io/no-such-gpu" in scheduling_message(pod), scheduling_message(pod)
    assert not (pod.get("status") or {}).get("extendedResourceClaimStatus")


def test_without_admin_access_a_claim_for_a_device_in_use_waits(handle):
    """The admin-access check's premise: what lets the admin claim in is admin access, not a free device."""
    only = ["device.attributes['gpu.example.com'].index == 0"]
    # One pod after the other: created together, either may get the device first.
    for pod in ("user", "not-admin"):
        handle.claim("controls", pod, handle.request(selectors=only))
        handle.pod("controls", pod, claim=pod, node_name="gpu-node-0")
        if pod == "user":
            wait_running(handle.kube, "controls", "user")
    assert "cannot allocate all claims" in scheduling_message(wait_unschedulable(handle.kube, "controls", "not-admin", timeout=60))


def _listening(pid: int, seen_from: int | str) -> set[str]:
    """``address:port`` of the TCP sockets ``pid`` listens on, in the network namespace of ``seen_from``."""
    inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1] for fd in os.listdir(f"/proc/{pid}/fd")
              if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:[")}
    out = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{seen_from}/net/{table}").read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # LISTEN
                addr, port = f[1].split(":")
                host = ".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0)) if len(addr) == 8 else f"[{addr}]"
                out.add(f"{host}:{int(port, 16)}")
    return out


def test_without_the_drivers_webhook_an_invalid_config_is_admitted_and_with_it_nothing_listens_beyond_loopback(handle):
    res, bad = config_webhook.config_object("ResourceClaim", "v1", handle.device_class, handle.driver, "InvalidInterval")
    assert config_webhook.refusal(handle.kube, res, bad, "controls") is None, "admitted with no webhook: the check can fail"
    # Negative control of the wait for the configuration: with none registered, it never takes effect.
    with pytest.raises(ClusterError, match="did not take effect within 1 s"):
        driver_webhook.wait_in_effect(handle.kube, "controls", deadline_s=1)
    name = handle.provider.start_driver_webhook("controls", "controls")
    try:
        assert driver_webhook.wait_in_effect(handle.kube, "controls", deadline_s=1) < 1  # start waited for it
        assert config_webhook.REFUSAL in (config_webhook.refusal(handle.kube, res, bad, "controls") or "")
        relay = handle.provider.embedded.supervisor.get(driver_webhook.process_name("controls")).pid
        server = int(Path(f"/proc/{relay}/task/{relay}/children").read_text().split()[0])
        assert os.readlink(f"/proc/{server}/ns/net") != os.readlink("/proc/self/ns/net"), "the webhook shares the host's network"
        # The relay's socket was bound before it left the host's namespace: the host sees it, on loopback only.
        assert {a.split(":")[0] for a in _listening(relay, "self")} == {"127.0.0.1"}, _listening(relay, "self")
        assert not _listening(server, "self"), "the webhook's own socket is in the host's namespace"
        assert {a.rsplit(":", 1)[1] for a in _listening(server, server)} == {"8443"}, _listening(server, server)
    finally:
        handle.provider.stop_driver_webhook(name)


def test_a_webhook_stopped_for_one_namespace_leaves_another_namespaces_webhook_answering(handle):
    """The suites' xdist workers share one cluster; a webhook per test namespace must not be one process."""
    handle.kube.create(rest.NAMESPACES, {"metadata": {"name": "controls-2"}})
    res, bad = config_webhook.config_object("ResourceClaim", "v1", handle.device_class, handle.driver, "InvalidInterval")
    first = handle.provider.start_driver_webhook("controls", "controls")
    second = handle.provider.start_driver_webhook("controls-2", "controls")
    try:
        handle.provider.stop_driver_webhook(first)
        assert config_webhook.REFUSAL in (config_webhook.refusal(handle.kube, res, bad, "controls-2") or ""), \
            "stopping the first namespace's webhook ended the second's"
        assert config_webhook.refusal(handle.kube, res, bad, "controls") is None, "the first webhook is still registered"
    finally:
        handle.provider.stop_driver_webhook(second)
        handle.kube.delete(rest.NAMESPACES, "controls-2")
    pki = handle.provider.embedded.state_dir / "pki"
    assert not list(pki.glob(f"{driver_webhook.PROCESS}-*")), "the webhooks' serving certificates were left"


def test_negative_control_pods_without_a_pod_group_bind_as_far_as_they_fit(handle):
    """The gang check's failure, shown: the same 2 pods (small cluster: 2 devices a node, one held) without a
    PodGroup; one binds at once, which is what the check calls partial scheduling."""
    g = gang.start(handle, "controls", 2, None)
    bound = gang.bound_within(handle, "controls", g, 60)
    assert len(bound) == 1, f"plain pods where one fits: {bound} bound"
