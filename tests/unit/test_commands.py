"""Component command lines: loopback only, the version's gates, and the state dir in every one."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from dra_harness.providers.driver_configs import by_name
from dra_harness.components import gates
from dra_harness.providers.embedded import commands
from dra_harness.providers.embedded.pki import PKI
from dra_harness.providers.localstate import ClusterSpec, ClusterState

STATE = ClusterState(
    spec=ClusterSpec(name="t", k8s_version="1.36.3"),
    ports={"etcd": 1, "etcd_peer": 2, "apiserver": 3, "controller_manager": 4, "scheduler": 5, "kwok": 6},
    binaries={b: f"/bin/{b}" for b in ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
                                       "dra-example-kubeletplugin"]},
)
PATHS = commands.Paths(Path("/state/t"), Path("/state/t/kubeconfig"), PKI(Path("/state/t/pki")))


def all_argv() -> dict[str, list[str]]:
    argv = {name: build(STATE, PATHS) for name, build in commands.ARGV.items()}
    dirs = {k: Path(f"/tmp/x/{k}") for k in ("cdi", "registrar", "plugins")}
    argv["driver"] = commands.driver(STATE, PATHS, "gpu-node-0", dirs, "gpu.example.com")
    return argv


def test_every_listener_is_bound_to_loopback():
    for name, argv in all_argv().items():
        for arg in argv:
            for address in re.findall(r"(?:https?://)?(\d+\.\d+\.\d+\.\d+):\d+", arg):
                assert address == "127.0.0.1", f"{name}: {arg}"
            if arg.startswith("--bind-address="):
                assert arg == "--bind-address=127.0.0.1", f"{name}: {arg}"


def test_every_command_names_the_state_dir_so_strays_can_be_found():
    for name, argv in all_argv().items():
        assert any("/state/t/" in a for a in argv), name


def test_the_control_plane_gets_the_versions_gates():
    flag = f"--feature-gates={gates.feature_gates_flag('1.36.3')}"
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert flag in all_argv()[name], name
    assert f"--runtime-config={gates.runtime_config_flag('1.36.3')}" in all_argv()["kube-apiserver"]


def test_the_driver_has_no_listeners_and_private_dirs():
    argv = all_argv()["driver"]
    assert "--healthcheck-port=-1" in argv and "--metrics-port=-1" in argv
    assert "--cdi-root=/tmp/x/cdi" in argv and "--node-name=gpu-node-0" in argv


def test_a_node_in_a_driver_configuration_starts_its_plugin_with_that_configurations_flags():
    dirs = {k: Path(f"/tmp/x/{k}") for k in ("cdi", "registrar", "plugins")}
    state = dataclasses.replace(STATE, driver_configs={"gpu-node-1": "net", "gpu-node-2": "multiple-allocations-partitions-4"})
    default, net, parts = (commands.driver(state, PATHS, f"gpu-node-{i}", dirs, "gpu.example.com") for i in range(3))
    assert "--driver-name=gpu.example.com" in default and not any("profile" in a or "partitions" in a for a in default)
    assert "--driver-name=net.example.com" in net and "--device-profile=net" in net
    assert {"--gpu-allow-multiple-allocations", "--gpu-partitions=4", "--driver-name=gpu.example.com"} <= set(parts)


def test_a_configuration_names_the_devices_its_slices_must_hold():
    assert by_name("partitions-4").devices(1) == [f"gpu-0-partition-{j}" for j in range(4)] + ["gpu-0-full"]
    assert by_name("net").devices(2) == ["nic-0", "nic-1"] and by_name("net").driver == "net.example.com"
    assert by_name("device-status").devices(2) == ["gpu-0", "gpu-1"]
    with pytest.raises(ValueError, match="no driver configuration 'mig'; known: default, partitions-4"):
        by_name("mig")


def _flags(argv: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) if "=" in a else (a[2:], "") for a in argv if a.startswith("--"))


def test_etcd_serves_tls_only_and_requires_a_client_certificate_of_its_own_ca():
    flags = _flags(all_argv()["etcd"])
    for url in ("listen-client-urls", "advertise-client-urls", "listen-peer-urls", "initial-advertise-peer-urls"):
        assert flags[url].startswith("https://127.0.0.1:"), url
    assert "client-cert-auth" in flags and "peer-client-cert-auth" in flags
    assert flags["trusted-ca-file"] == flags["peer-trusted-ca-file"] == str(PATHS.pki.etcd_ca_cert)
    assert flags["trusted-ca-file"] != str(PATHS.pki.ca_cert)
    assert flags["listen-metrics-urls"] == ""


def test_the_api_server_authenticates_to_etcd_and_to_kubelets_and_verifies_kubelets():
    flags = _flags(all_argv()["kube-apiserver"])
    assert flags["etcd-servers"].startswith("https://127.0.0.1:")
    assert flags["etcd-cafile"] == str(PATHS.pki.etcd_ca_cert)
    assert flags["etcd-certfile"] == str(PATHS.pki.identity(commands.APISERVER_ETCD_CLIENT).cert)
    assert flags["kubelet-client-certificate"] == str(PATHS.pki.identity(commands.APISERVER_KUBELET_CLIENT).cert)
    assert flags["kubelet-client-key"] == str(PATHS.pki.identity(commands.APISERVER_KUBELET_CLIENT).key)
    assert flags["kubelet-certificate-authority"] == str(PATHS.pki.ca_cert)
