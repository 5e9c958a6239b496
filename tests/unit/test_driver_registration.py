"""A real node's driver start returns once its kubelet registers the new plugin, read from the kubelet's log.

Why it matters: a pod that reaches the kubelet between the restart and the registration fails to
prepare its claims and runs only after the kubelet's retry, about ten seconds later (three driver
configuration checks lost 10-14 s each to it). The line read is the kubelet's own, copied from a
v1.37.2 kubelet's log; the controls are the lines that must not end the wait: the stopped plugin's
registration (its socket seen before the restart) and another registrar directory's.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from dra_harness.providers.embedded.drivers import REGISTERING, REGISTRATION_TIMEOUT_S, Drivers, registered_since

REGISTRAR = Path("/tmp/drh-t5mmeg8s/k0/plugins_registry")
RESTART = 1796534435.0  # 2026-12-06T05:20:35Z


def _line(registrar: Path, seen: str) -> str:
    return (f'I1206 05:20:37.212772   30113 reconciler.go:161] "{REGISTERING}" plugin={{"SocketPath":'
            f'"{registrar}/gpu.example.com-reg.sock","Timestamp":"{seen}","UUID":"b97df250","Handler":null,'
            f'"Name":"","Endpoint":""}}')


def test_the_new_sockets_registration_ends_the_wait():
    log = "\n".join(["I1206 unrelated line", _line(REGISTRAR, "2026-12-06T05:20:35.679691674Z")])
    assert registered_since(log, REGISTRAR, RESTART)


def test_the_stopped_plugins_registration_does_not_end_it():
    # Its socket was seen a second before the restart: a late retry of the old plugin's registration.
    assert not registered_since(_line(REGISTRAR, "2026-12-06T05:20:34.000000000Z"), REGISTRAR, RESTART)


def test_another_registrar_directorys_registration_does_not_end_it():
    other = Path("/tmp/drh-t5mmeg8s/k1/plugins_registry")
    assert not registered_since(_line(other, "2026-12-06T05:20:36Z"), REGISTRAR, RESTART)


def test_an_unregistration_does_not_end_it():
    line = _line(REGISTRAR, "2026-12-06T05:20:36Z").replace(REGISTERING, "OperationExecutor.UnregisterPlugin started")
    assert not registered_since(line, REGISTRAR, RESTART)


def test_the_wait_reads_on_and_finds_a_line_written_in_two_halves(tmp_path):
    """The wait reads each byte of the log once, from the mark on: a registration line the kubelet is still
    writing at one look is found whole at the next; what was there before the mark is never read."""
    log = tmp_path / "kubelet-n0.log"
    log.write_text(_line(REGISTRAR, "2026-12-06T05:20:36Z") + "\n")  # before the mark: must not end the wait
    mark = log.stat().st_size
    line = _line(REGISTRAR, "2026-12-06T05:20:35.679691674Z") + "\n"
    looks: list[int] = []
    supervisor = SimpleNamespace(log_dir=tmp_path, exited=lambda name: None)
    drivers = Drivers(SimpleNamespace(supervisor=supervisor))

    def writing(name: str) -> None:  # called at each look that did not find it: the line grows half by half
        looks.append(log.stat().st_size)
        if len(looks) <= 2:
            with log.open("a") as f:
                f.write(line[: len(line) // 2] if len(looks) == 1 else line[len(line) // 2:])

    supervisor.exited = writing
    started = time.monotonic()
    drivers._wait_registered("n0", REGISTRAR, mark, RESTART)
    assert len(looks) == 2 and time.monotonic() - started < REGISTRATION_TIMEOUT_S, looks
