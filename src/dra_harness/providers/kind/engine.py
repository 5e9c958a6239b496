"""The Docker engine kind runs on: a running one is used as it is; otherwise we start Debian's dockerd.

Why we may start one: CI and our machines have the Docker CLI but no engine, and kind
needs one. As root, :func:`ensure` installs Debian's ``docker.io`` (and ``jq``, which
the shim below uses), starts ``dockerd`` with a config file of ours, and records what
it changed so that :func:`stop` can put it back. On a systemd host the package starts and
enables its own docker service: when we installed the package, that service is stopped and
disabled at once, so one dockerd runs (ours) and none starts at boot:

* **the runtime shim** (``data/docker/runc-shim``), registered as dockerd's default
  runtime only where this host's capability bounding set lacks a capability Docker
  grants a ``--privileged`` container (CAP_SYS_RESOURCE here). Without it every kind
  node fails with ``unable to apply caps``. A complete host gets plain runc.
* **iptables**: dockerd adds the DOCKER, DOCKER-USER and DOCKER-ISOLATION-STAGE-* chains,
  jumps to them from FORWARD, PREROUTING and OUTPUT, and MASQUERADE rules for its bridges
  (docker0, and ``br-<id>`` for kind's network). It sets FORWARD's policy to DROP only when
  it had to turn IP forwarding on. :func:`stop` deletes the rules and chains that name
  Docker or its bridges and were not there before, and restores FORWARD's policy and
  ``net.ipv4.ip_forward``; rules others added meanwhile (the embedded cluster's real
  nodes) are left alone, and so are the rules someone put in DOCKER-USER (the admin's chain)
  and the host's forwarding while others' forwarding rules need it.
* **links**: docker0 and the bridges of networks it made, deleted by :func:`stop`.

dockerd listens on its unix socket only (root-only), never on TCP. Its images stay in
``/var/lib/docker``: that is the node image cache. Everything else lives in
``/run/dra-harness/docker`` (root, 0700).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dra_harness import data
from dra_harness.components import build as builder
from dra_harness.components import prereqs
from dra_harness.host.processes import process_start_time
from dra_harness.providers.kind.tools import KindError

STATE = Path("/run/dra-harness/docker")
SOCKET = "/var/run/docker.sock"
SHIM = data.path("docker", "runc-shim")
PACKAGES = ["docker.io", "jq"]
#: Capability numbers as in linux/capability.h (0 .. 40).
CAP_NAMES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
    "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
    "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
    "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
    "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
    "CHECKPOINT_RESTORE",
)
_OURS = re.compile(r"DOCKER|docker0|br-[0-9a-f]{12}")


def running() -> bool:
    """A Docker engine answers on the CLI's socket."""
    if shutil.which("docker") is None:
        return False
    try:
        proc = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0 and bool(proc.stdout.strip())


def missing_capabilities(status: str | None = None, last_cap: int | None = None) -> list[str]:
    """Capabilities this kernel knows that our bounding set lacks (Docker grants them all to --privileged)."""
    if status is None:
        status = Path("/proc/self/status").read_text()
    if last_cap is None:
        last_cap = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    match = re.search(r"^CapBnd:\s*([0-9a-f]+)", status, re.M)
    bounding = int(match.group(1), 16) if match else 0
    return [f"CAP_{CAP_NAMES[i]}" for i in range(min(last_cap, len(CAP_NAMES) - 1) + 1) if not bounding >> i & 1]


@dataclass
class Started:
    """What we started and what the host looked like before (``STATE/started.json``)."""

    pid: int
    start_time: str
    shim: bool
    ip_forward: str
    forward_policy: str
    links: list[str]
    rules: dict[str, list[str]]  # iptables-save lines per family, before

    def save(self) -> None:
        (STATE / "started.json").write_text(json.dumps(self.__dict__))

    @classmethod
    def load(cls) -> Started | None:
        try:
            return cls(**json.loads((STATE / "started.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None


def _private_state() -> None:
    """``STATE``, root's and 0700; refuse a path someone else owns or a symlink."""
    for d in (STATE.parent, STATE):
        d.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(d)
        if not os.path.isdir(d) or os.path.islink(d) or st.st_uid != 0:
            raise KindError(f"{d} is not a directory owned by root; remove it and retry")
        os.chmod(d, 0o700)


@contextmanager
def _locked() -> Iterator[None]:
    _private_state()
    with builder.lock(STATE / "lock"):
        yield


def _links() -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return sorted(m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)", out, re.M))


def _save(family: str) -> list[str]:
    tool = "iptables-save" if family == "v4" else "ip6tables-save"
    if shutil.which(tool) is None:
        return []
    out = subprocess.run([tool], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if ln and not ln.startswith("#")]


def _forward_policy() -> str:
    out = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True).stdout
    m = re.search(r"^-P FORWARD (\w+)", out, re.M)
    return m.group(1) if m else "ACCEPT"


def cannot_start() -> str | None:
    """Why the harness cannot get an engine running here (one line), None when it can; asked when none answers."""
    if os.geteuid() != 0:
        if shutil.which("docker") is None:
            return ("the kind provider needs Docker: `docker` is not on PATH, and only root may have "
                    "the harness install and start Debian's engine")
        return ("the kind provider needs a running Docker engine: none answers `docker info`, and only "
                "root may have the harness start Debian's dockerd")
    if shutil.which("dockerd") is None and shutil.which("apt-get") is None:
        return "the kind provider needs a Docker engine: no dockerd, and no apt-get to install Debian's docker.io"
    return None


def ensure(say: Callable[[str], None] = lambda s: None) -> bool:
    """A Docker engine is running when this returns; True when we started it."""
    if running():
        return False
    reason = cannot_start()
    if reason:
        raise KindError(reason)
    with _locked():
        if running():
            return False
        stale = Started.load()
        if stale is not None and process_start_time(stale.pid) == stale.start_time:
            raise KindError(f"the dockerd the harness started (pid {stale.pid}) does not answer; see {STATE / 'dockerd.log'}")
        if stale is not None:  # a dockerd of ours that died: take back what it left before recording anew
            _undo(stale)
            (STATE / "started.json").unlink(missing_ok=True)
        installing = prereqs.missing(PACKAGES)
        if installing:
            say("installing Debian's Docker engine")
        try:
            prereqs.ensure(PACKAGES, "the kind provider's Docker engine")
        except prereqs.PrereqError as e:
            raise KindError(str(e)) from None
        for argv in package_service_off("docker.io" in installing, Path("/run/systemd/system").is_dir()):
            say("stopping and disabling the docker service the package started (the harness runs its own dockerd)")
            subprocess.run(argv, capture_output=True)
        shim = bool(missing_capabilities())
        config: dict[str, object] = {"hosts": [f"unix://{SOCKET}"], "pidfile": str(STATE / "dockerd.pid")}
        if shim:
            target = STATE / "runc-shim"
            shutil.copyfile(SHIM, target)
            target.chmod(0o755)
            config["runtimes"] = {"dra-harness-runc": {"path": str(target)}}
            config["default-runtime"] = "dra-harness-runc"
        (STATE / "daemon.json").write_text(json.dumps(config, indent=2))
        ip_forward, policy, links = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(), _forward_policy(), _links()
        rules = {"v4": _save("v4"), "v6": _save("v6")}
        say("starting dockerd" + (" (with the runtime shim: this host lacks " + ", ".join(missing_capabilities()) + ")" if shim else ""))
        with open(STATE / "dockerd.log", "ab") as log:
            proc = subprocess.Popen(["dockerd", "--config-file", str(STATE / "daemon.json")], stdout=log, stderr=log,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        Started(proc.pid, process_start_time(proc.pid) or "", shim, ip_forward, policy, links, rules).save()
        deadline = time.monotonic() + 60
        while not running():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (STATE / "dockerd.log").read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
                raise KindError(f"dockerd did not start: {tail[0][:300]} (log {STATE / 'dockerd.log'})")
            time.sleep(0.5)
        return True


def package_service_off(installed_now: bool, systemd: bool) -> list[list[str]]:
    """What undoes the service Debian's package starts and enables on a systemd host, when we installed it:
    a second dockerd on the same socket and data, and one that would start at every boot."""
    return [["systemctl", "disable", "--now", "docker.socket", "docker.service"]] if installed_now and systemd else []


def stop(say: Callable[[str], None] = lambda s: None) -> list[str]:
    """Stop the dockerd we started (only when it runs no container) and undo its host changes; what was undone."""
    with _locked():
        rec = Started.load()
        if rec is None:
            return []
        if process_start_time(rec.pid) == rec.start_time:
            listed = subprocess.run(["docker", "ps", "-aq"], capture_output=True, text=True)
            if listed.returncode != 0 or listed.stdout.split():
                say("leaving dockerd running: " + (f"{len(listed.stdout.split())} containers remain"
                                                    if listed.returncode == 0 else "it does not list its containers"))
                return []
            say("stopping dockerd")
            os.kill(rec.pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while process_start_time(rec.pid) == rec.start_time and time.monotonic() < deadline:
                time.sleep(0.3)
            if process_start_time(rec.pid) == rec.start_time:
                os.kill(rec.pid, signal.SIGKILL)
        undone = _undo(rec)
        (STATE / "started.json").unlink(missing_ok=True)
        return undone


def _undo(rec: Started) -> list[str]:
    undone = []
    for link in sorted(set(_links()) - set(rec.links)):
        if _OURS.search(link):
            subprocess.run(["ip", "link", "delete", link], capture_output=True)
            undone.append(f"link {link}")
    others = others_forwarding(rec.rules.get("v4", []), _save("v4"))
    for family, tool in (("v4", "iptables"), ("v6", "ip6tables")):
        undone += _undo_rules(tool, rec.rules.get(family, []), _save(family))
    forwarding = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()
    if others and (forwarding != rec.ip_forward or _forward_policy() != rec.forward_policy):
        # Turning forwarding off (or the policy back to ACCEPT) under someone who started routing since
        # would cut them off (or open the host); Docker's DROP policy is the safe side to leave.
        undone.append(f"left net.ipv4.ip_forward={forwarding} and FORWARD policy {_forward_policy()}: "
                      f"{len(others)} forwarding rule(s) others added since need it ({others[0]})")
        return undone
    if _forward_policy() != rec.forward_policy:
        subprocess.run(["iptables", "-P", "FORWARD", rec.forward_policy], capture_output=True)
        undone.append(f"FORWARD policy back to {rec.forward_policy}")
    if forwarding != rec.ip_forward:
        Path("/proc/sys/net/ipv4/ip_forward").write_text(rec.ip_forward)
        undone.append(f"net.ipv4.ip_forward back to {rec.ip_forward}")
    return undone


#: Docker's one rule in the chain it leaves to the host's admin; any other rule there is someone's.
_USER_CHAIN, _USER_DEFAULT = "DOCKER-USER", "DOCKER-USER -j RETURN"


def docker_rules(before: list[str], now: list[str]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(rules, chains) Docker added since ``before``: each as (table, rule or chain name).

    DOCKER-USER is the host admin's chain: rules someone put there are theirs and stay, and so does the
    chain then (it is only flushed and removed when it holds Docker's default ``RETURN`` alone)."""
    rules, chains = [], []
    kept: set[str] = set()  # tables whose DOCKER-USER holds someone's rules
    for table, line in _added(before, now):
        if not _OURS.search(line):
            continue
        elif line.startswith(":"):
            chains.append((table, line[1:].split()[0]))
        elif line.startswith(f"-A {_USER_CHAIN} ") and line[3:] != _USER_DEFAULT:
            kept.add(table)
        elif line.startswith("-A "):
            rules.append((table, line[3:]))
    chains = [(t, c) for t, c in chains if not (c == _USER_CHAIN and t in kept)]
    rules = [(t, r) for t, r in rules if not (t in kept and r == _USER_DEFAULT)]
    return rules, chains


def others_forwarding(before: list[str], now: list[str]) -> list[str]:
    """Forwarding rules someone other than Docker added since ``before`` (FORWARD, nat POSTROUTING): while
    they exist, IP forwarding is theirs to need, and the host's forwarding stays as it is."""
    return [f"{table}: {line[3:]}" for table, line in _added(before, now) if not _OURS.search(line) and (
            line.startswith("-A FORWARD ") or (table == "nat" and line.startswith("-A POSTROUTING ")))]


def _added(before: list[str], now: list[str]) -> Iterator[tuple[str, str]]:
    """(table, line) of the iptables-save lines in ``now`` that were not in ``before``."""
    seen, table = set(before), ""
    for line in now:
        if line.startswith("*"):
            table = line[1:]
        elif line not in seen:
            yield table, line


def _undo_rules(tool: str, before: list[str], now: list[str]) -> list[str]:
    rules, chains = docker_rules(before, now)
    undone = []
    for table, rule in rules:
        chain, _, spec = rule.partition(" ")
        subprocess.run([tool, "-t", table, "-D", chain, *shlex.split(spec)], capture_output=True)
    for table, chain in chains:
        subprocess.run([tool, "-t", table, "-F", chain], capture_output=True)
    for table, chain in chains:
        if subprocess.run([tool, "-t", table, "-X", chain], capture_output=True).returncode == 0:
            undone.append(f"{tool} -t {table} chain {chain}")
    return undone + ([f"{tool}: {len(rules)} rules"] if rules else [])
