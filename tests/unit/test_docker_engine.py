"""The Docker engine's host bookkeeping (missing capabilities, Docker's iptables lines) and who may have the harness start it."""

from __future__ import annotations

import re

import pytest

from dra_harness.providers.kind import engine, provider
from dra_harness.providers.kind.tools import KindError

FULL = "CapBnd:\t000001ffffffffff\n"
NO_SYS_RESOURCE = "CapBnd:\t000001fffeffffff\n"


def test_a_complete_bounding_set_misses_nothing():
    assert engine.missing_capabilities(FULL, last_cap=40) == []


def test_a_bounding_set_without_sys_resource_is_reported_by_name():
    assert engine.missing_capabilities(NO_SYS_RESOURCE, last_cap=40) == ["CAP_SYS_RESOURCE"]


def test_capabilities_the_kernel_does_not_know_are_not_missing():
    # An older kernel (cap_last_cap 37) has no PERFMON, BPF or CHECKPOINT_RESTORE to grant.
    assert engine.missing_capabilities("CapBnd:\t0000003fffffffff\n", last_cap=37) == []


BEFORE = """*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
-A FORWARD -j KUBE-FORWARD
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -j ACCEPT
COMMIT
*nat
:POSTROUTING ACCEPT [0:0]
-A POSTROUTING -s 10.88.0.0/16 -j MASQUERADE
COMMIT""".splitlines()

AFTER = """*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:DOCKER - [0:0]
:DOCKER-USER - [0:0]
:KUBE-FORWARD - [0:0]
:CNI-FORWARD - [0:0]
-A FORWARD -j DOCKER-USER
-A FORWARD -o br-0123456789ab -j DOCKER
-A FORWARD -j KUBE-FORWARD
-A FORWARD -j CNI-FORWARD
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -j ACCEPT
-A DOCKER-USER -j RETURN
COMMIT
*nat
:POSTROUTING ACCEPT [0:0]
:DOCKER - [0:0]
-A POSTROUTING -s 10.88.0.0/16 -j MASQUERADE
-A POSTROUTING -s 172.18.0.0/16 ! -o br-0123456789ab -j MASQUERADE
-A POSTROUTING -s 10.22.0.0/16 -j MASQUERADE
COMMIT""".splitlines()


def test_only_dockers_new_rules_and_chains_are_taken_back():
    rules, chains = engine.docker_rules(BEFORE, AFTER)
    assert chains == [("filter", "DOCKER"), ("filter", "DOCKER-USER"), ("nat", "DOCKER")]
    assert rules == [
        ("filter", "FORWARD -j DOCKER-USER"),
        ("filter", "FORWARD -o br-0123456789ab -j DOCKER"),
        ("filter", "DOCKER-USER -j RETURN"),
        ("nat", "POSTROUTING -s 172.18.0.0/16 ! -o br-0123456789ab -j MASQUERADE"),
    ]
    # Negative control: another tenant's chain and masquerade rule added meanwhile stay.
    flat = {r for _, r in rules} | {c for _, c in chains}
    assert "CNI-FORWARD" not in flat and "POSTROUTING -s 10.22.0.0/16 -j MASQUERADE" not in flat


def test_rules_docker_found_in_place_are_left_alone():
    rules, chains = engine.docker_rules(AFTER, AFTER)
    assert rules == [] and chains == []


@pytest.mark.parametrize("cli, message", [
    ("/usr/bin/docker", "needs a running Docker engine: none answers `docker info`, and only root may"),
    (None, "needs Docker: `docker` is not on PATH, and only root may"),
])
def test_a_user_who_is_not_root_is_told_the_engine_must_run_already(monkeypatch, cli, message):
    """Only root may have the harness install and start dockerd; anyone else needs one running."""
    monkeypatch.setattr(engine, "running", lambda: False)
    monkeypatch.setattr(engine.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(engine.shutil, "which", lambda name: cli if name == "docker" else None)
    with pytest.raises(KindError, match=re.escape(message)):
        provider.check_prerequisites()


def test_root_without_an_engine_is_not_refused_while_dockerd_can_be_had(monkeypatch):
    """Negative control of the above: as root, with dockerd or apt-get at hand, the check lets the engine be started."""
    monkeypatch.setattr(engine, "running", lambda: False)
    monkeypatch.setattr(engine.os, "geteuid", lambda: 0)
    monkeypatch.setattr(engine.shutil, "which", lambda name: f"/usr/sbin/{name}" if name in ("dockerd", "apt-get") else None)
    monkeypatch.setattr(provider.builder, "go_version", lambda: "go1.26.8")
    provider.check_prerequisites()


def test_rules_an_admin_put_in_docker_user_stay_and_so_does_the_chain():
    admin = AFTER[:AFTER.index("-A DOCKER-USER -j RETURN")] + ["-A DOCKER-USER -s 10.0.0.0/8 -j DROP"] + \
        AFTER[AFTER.index("-A DOCKER-USER -j RETURN"):]
    rules, chains = engine.docker_rules(BEFORE, admin)
    assert ("filter", "DOCKER-USER") not in chains and ("filter", "DOCKER") in chains
    assert not [r for _, r in rules if r.startswith("DOCKER-USER ")], rules
    assert ("filter", "FORWARD -j DOCKER-USER") in rules  # Docker's own jump goes with Docker
    # Negative control: with Docker's default alone, the chain is Docker's and goes.
    assert ("filter", "DOCKER-USER") in engine.docker_rules(BEFORE, AFTER)[1]


def test_forwarding_rules_others_added_since_docker_started_are_found_and_dockers_are_not():
    assert engine.others_forwarding(BEFORE, AFTER) == [
        "filter: FORWARD -j CNI-FORWARD", "nat: POSTROUTING -s 10.22.0.0/16 -j MASQUERADE"]
    assert engine.others_forwarding(BEFORE, BEFORE) == []


def test_the_docker_service_the_package_starts_is_disabled_only_where_we_installed_it_on_systemd():
    assert engine.package_service_off(True, True) == [["systemctl", "disable", "--now", "docker.socket", "docker.service"]]
    # Negative controls: a package the host had, or a host without systemd, is left as it is.
    assert engine.package_service_off(False, True) == [] and engine.package_service_off(True, False) == []
