"""The listener classifier, on plain /proc tables: loopback or refusing strangers, anything else flagged."""

from __future__ import annotations

from dra_harness.providers.embedded.exposure import REFUSALS, Listener, unauthenticated
from dra_harness.host.processes import parse_tcp_listeners

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
TCP = HEADER + "".join(
    f"   {i}: {local} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000     0        0 {inode} 1 0 100 0 0 10 0\n"
    for i, (local, state, inode) in enumerate([
        ("0100007F:0929", "0A", "101"),  # 127.0.0.1:2345, etcd
        ("050012C6:2A7B", "0A", "102"),  # 198.18.0.5:10875, a kubelet on its node IP
        ("00000000:1F90", "0A", "103"),  # 0.0.0.0:8080, a wildcard listener
        ("0100007F:0929", "01", "104"),  # an established connection, not a listener
    ])
)
TCP6 = HEADER + (
    "   0: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000     0        0 201 1 0 100 0 0 10 0\n"
    "   1: 0000000000000000FFFF00000100007F:0051 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000     0        0 202 1 0 100 0 0 10 0\n"
)


def test_listen_rows_are_read_with_their_addresses_ports_and_inodes():
    assert parse_tcp_listeners(TCP, v6=False) == [
        ("127.0.0.1", 2345, "101"), ("198.18.0.5", 10875, "102"), ("0.0.0.0", 8080, "103"),
    ]
    assert parse_tcp_listeners(TCP6, v6=True) == [("::1", 80, "201"), ("::ffff:7f00:1", 81, "202")]
    assert Listener("::ffff:7f00:1", 81, 1, "p").loopback and not Listener("::", 80, 1, "p").loopback


def _listeners() -> list[Listener]:
    rows = parse_tcp_listeners(TCP, v6=False) + parse_tcp_listeners(TCP6, v6=True)
    return [Listener(a, p, 1000 + i, "proc") for i, (a, p, _) in enumerate(rows)]


def test_loopback_listeners_are_not_asked_and_every_other_one_is():
    asked = []
    answers = {10875: "https 401", 8080: "https 401"}
    problems = unauthenticated(_listeners(), lambda host, port: asked.append((host, port)) or answers[port])
    assert problems == []
    # The wildcard listener is reached at loopback; the node-IP one at its own address.
    assert asked == [("198.18.0.5", 10875), ("127.0.0.1", 8080)]


def test_negative_control_a_listener_beyond_loopback_that_serves_strangers_is_flagged():
    answers = {10875: "https 401", 8080: "http 200"}
    problems = unauthenticated(_listeners(), lambda host, port: answers[port])
    assert len(problems) == 1 and "0.0.0.0:8080 answers a stranger: http 200" in problems[0]
    for answer in ("https 200", "https 403", "no answer: TLS UNKNOWN"):
        assert unauthenticated(_listeners()[1:2], lambda host, port, answer=answer: answer), answer
    assert "https 401" in REFUSALS and "tls requires a client certificate" in REFUSALS
