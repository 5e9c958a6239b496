"""Start, track and stop the embedded cluster's processes.

Why our own supervisor rather than kwokctl's binary runtime: the cluster also runs
one example-driver plugin per node, which kwokctl knows nothing about; kwokctl binds
0.0.0.0 unless configured otherwise and shells out to a kubectl from PATH. Here every
process runs in its own session (so a Ctrl-C of the harness does not reach it and a
stop can kill its whole group), is recorded in a pid file together with its kernel
start time (so a reused pid is never killed), and carries the cluster's state
directory in its command line, which lets ``cluster down --all`` find strays even
when a pid file was never written.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from dra_harness import lifetime
from dra_harness.errors import ClusterError

log = logging.getLogger(__name__)


def process_start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may contain spaces and parentheses; fields follow the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return fields[19]


EXITED = "exited"  # the start time recorded for a child already gone when its pid file was written


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass(frozen=True)
class Tracked:
    name: str
    pid: int
    start_time: str

    def alive(self) -> bool:
        return process_start_time(self.pid) == self.start_time


class Supervisor:
    """The processes of one cluster, tracked by pid files under ``<state>/pids``."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.pid_dir = state_dir / "pids"
        self.log_dir = state_dir / "logs"
        self._children: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Tracked:
        """Start ``name``; refused while a live process of that name is tracked, since its pid file would be
        overwritten and a later ``stop`` of one caller would end the other's (two xdist workers' webhooks did)."""
        running = self.get(name)
        if running is not None and running.alive():
            raise ClusterError(f"{name} is already running (pid {running.pid}, pid file {self.pid_dir / (name + '.pid')}): "
                               f"stop it first, or give the second one a name of its own")
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_file = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed in the finally below, once the child has its own copy
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **(env or {})},
                cwd=self.state_dir,
            )
        finally:
            log_file.close()
        # A child that failed at once (a bad flag) may be a zombie already: record it as gone rather than
        # with an empty start time, which tracked() could not parse, so a start-up wait would never see it die.
        start = process_start_time(proc.pid) or EXITED
        (self.pid_dir / f"{name}.pid").write_text(f"{proc.pid} {start}\n")
        self._children[name] = proc
        log.info("started %s (pid %d, log %s)", name, proc.pid, self.log_dir / f"{name}.log")
        return Tracked(name, proc.pid, start)

    def tracked(self) -> list[Tracked]:
        found = []
        for pid_file in sorted(self.pid_dir.glob("*.pid")):
            try:
                pid, start = pid_file.read_text().split()
                found.append(Tracked(pid_file.stem, int(pid), start))
            except (OSError, ValueError):
                continue
        return found

    def get(self, name: str) -> Tracked | None:
        return next((t for t in self.tracked() if t.name == name), None)

    def exited(self, name: str) -> int | None:
        """Exit code of a child started by this supervisor, None while it runs."""
        proc = self._children.get(name)
        return proc.poll() if proc else None

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            text = (self.log_dir / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, name: str, grace: float = 5.0, sig: int = signal.SIGTERM) -> None:
        """Stop one process group: ``sig`` first, SIGKILL after ``grace`` seconds."""
        tracked = self.get(name)
        if tracked is not None:
            if tracked.pid not in lifetime.lineage():  # the watchdog running `down` spares itself
                log.info("stopping %s (pid %d, %s)", name, tracked.pid,
                         "SIGKILL" if sig == signal.SIGKILL else f"{signal.Signals(sig).name}, SIGKILL after {grace:.0f}s")
                stop_group(tracked, grace, sig)
            self._reap(name)
            (self.pid_dir / f"{name}.pid").unlink(missing_ok=True)

    def stop_all(self, order: list[str] | None = None, grace: float = 5.0) -> None:
        """Stop every tracked process, ``order`` first, then strays found by command line."""
        names = [t.name for t in self.tracked()]
        for name in (order or []) + names:
            if name in names:
                self.stop(name, grace)
        for pid in strays(self.state_dir):
            log.info("stopping stray pid %d of %s", pid, self.state_dir)
            stop_group(Tracked("stray", pid, process_start_time(pid) or ""), grace, signal.SIGTERM)

    def _reap(self, name: str) -> None:
        proc = self._children.pop(name, None)
        if proc is not None:
            try:
                proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass


def stop_group(tracked: Tracked, grace: float, sig: int) -> None:
    if not tracked.alive():
        return
    _signal(tracked.pid, sig)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not tracked.alive():
            return
        time.sleep(0.05)
    if tracked.alive():
        log.info("%s (pid %d) still running after %.0fs: SIGKILL", tracked.name, tracked.pid, grace)
        _signal(tracked.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while tracked.alive() and time.monotonic() < deadline:
            time.sleep(0.05)


def _signal(pid: int, sig: int) -> None:
    # Each process leads its own session, so its group id is its pid.
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(pid, sig)


def strays(state_dir: Path) -> list[int]:
    """Pids of live processes whose command line names ``state_dir``."""
    needle = str(state_dir) + os.sep
    spared = lifetime.lineage()  # a test run pointed at the cluster is not a stray
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in spared:
            if needle in cmdline(int(entry.name)) and process_start_time(int(entry.name)):
                pids.append(int(entry.name))
    return pids


def listening_sockets(pids: list[int]) -> list[tuple[str, int, int]]:
    """``(address, port, pid)`` of every TCP socket in LISTEN state owned by ``pids``.

    Each process's own network namespace is read (``/proc/<pid>/net/tcp``), so a listener in
    a pod's namespace counts as well as one in the host's.
    """
    inodes: dict[str, int] = {}
    tables: dict[str, int] = {}  # one pid per network namespace: its tables list that namespace's sockets
    for pid in pids:
        try:
            tables.setdefault(os.readlink(f"/proc/{pid}/ns/net"), pid)
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes[target[8:-1]] = pid
        except OSError:
            continue
    found = []
    for pid in tables.values():
        for name, v6 in (("tcp", False), ("tcp6", True)):
            try:
                text = Path(f"/proc/{pid}/net/{name}").read_text()
            except OSError:
                continue
            found += [(addr, port, inodes[inode]) for addr, port, inode in parse_tcp_listeners(text, v6) if inode in inodes]
    return found


def parse_tcp_listeners(table: str, v6: bool) -> list[tuple[str, int, str]]:
    """``(address, port, socket inode)`` of the LISTEN rows of a ``/proc/net/tcp`` or ``tcp6`` table."""
    found = []
    for line in table.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 10 or cols[3] != "0A":  # 0A = LISTEN
            continue
        addr_hex, port_hex = cols[1].split(":")
        found.append((_address(addr_hex, v6), int(port_hex, 16), cols[9]))
    return found


def _address(hex_addr: str, v6: bool) -> str:
    raw = bytes.fromhex(hex_addr)
    # /proc stores each 32-bit word in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.IPv6Address(words) if v6 else ipaddress.IPv4Address(words))
