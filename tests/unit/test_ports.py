"""Ports for a cluster's listeners: outside the kernel's ephemeral range, never one that is bound,
never one another run has just taken (the kwok "address already in use" CI saw)."""

from __future__ import annotations

import os
import random
import socket
import time

import pytest

from dra_harness.errors import ClusterError
from dra_harness.providers.embedded import ports


@pytest.fixture(autouse=True)
def registry(tmp_path, monkeypatch):
    monkeypatch.setenv("DRA_HARNESS_CACHE", str(tmp_path))
    return tmp_path / "ports"


def test_ports_come_from_below_the_ephemeral_range_or_above_it_when_it_starts_low():
    assert ports.candidates((32768, 60999)) == range(10000, 32768)
    assert ports.candidates((1024, 49151)) == range(49152, 65536)
    with pytest.raises(ClusterError, match="ephemeral range 1024-65000"):
        ports.candidates((1024, 65000))


def test_the_ephemeral_range_is_read_from_the_kernel_and_defaults_where_it_cannot_be(tmp_path):
    f = tmp_path / "range"
    f.write_text("20000\t40000\n")
    assert ports.ephemeral_range(f) == (20000, 40000)
    assert ports.ephemeral_range(tmp_path / "absent") == (32768, 60999)


def test_taken_ports_are_distinct_outside_the_ephemeral_range_and_reserved(registry):
    got = ports.take(["etcd", "apiserver", "scheduler"])
    assert len(set(got.values())) == 3
    low, _ = ports.ephemeral_range()
    assert all(ports.FLOOR <= p < low for p in got.values()), got
    assert sorted(int(f.name) for f in registry.iterdir() if f.name.isdigit()) == sorted(got.values())


def test_a_port_someone_listens_on_is_not_taken():
    rng = random.Random(7)
    first = ports.candidates(ports.ephemeral_range())
    wanted = random.Random(7).choice(first)  # the port the seeded draw tries first
    with socket.socket() as s:
        s.bind(("127.0.0.1", wanted))
        s.listen()
        got = ports.take(["kwok"], rng=rng)["kwok"]
    assert got != wanted


def test_a_port_another_run_reserved_is_not_taken_until_its_reservation_lapses(registry):
    # Both draws start from the same seed: without the reservation the second would return the first's port.
    first = ports.take(["kwok"], rng=random.Random(11))["kwok"]
    second = ports.take(["kwok"], rng=random.Random(11))["kwok"]
    assert second != first
    stale = time.time() - ports.RESERVED_S - 1
    os.utime(registry / str(first), (stale, stale))
    assert ports.take(["kwok"], rng=random.Random(11))["kwok"] == first
