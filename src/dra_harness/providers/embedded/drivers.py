"""The driver plugins of an embedded cluster's nodes: where each keeps its sockets, how it starts and stops,
which configuration and form it runs in.

Why a part of its own: starting a plugin, restarting it in another configuration and handing a node's
driver to a DaemonSet's pod each read and write the cluster's record (``cluster.json``), and the
checks that restart or swap a driver need exactly these rules (a pod's driver is its kubelet's to
start; NVIDIA's takes no example-driver configuration) applied in one place.

Why a start on a real node waits for the kubelet: the kubelet's plugin manager reconciles once a
second, so it unregisters the stopped plugin and registers the new one up to two seconds after the
restart. A pod that reaches the kubelet in between fails to prepare its claims ("driver not
registered") and runs only after the kubelet's retry, about ten seconds later: a delay of ours,
not the product's, that a check would time.
"""

from __future__ import annotations

import logging
import re
import signal
import time
from datetime import datetime
from pathlib import Path

from dra_harness.errors import ClusterError
from dra_harness.kube import rest
from dra_harness.providers import driver_configs
from dra_harness.providers.embedded import commands, realcluster
from dra_harness.providers.embedded.core import ClusterCore
from dra_harness.providers.localstate import ClusterState
from dra_harness.providers.profiles import EXAMPLE_DRIVER
from dra_harness.retrying import NotYet, until

log = logging.getLogger(__name__)

# What the kubelet logs (at -v=1, every release we run) as it registers a plugin's socket.
REGISTERING = "OperationExecutor.RegisterPlugin started"
REGISTRATION_TIMEOUT_S = 10.0
_TIMESTAMP = re.compile(r'"Timestamp":"([0-9T:.+-]+Z?)"')


class Drivers:
    """One cluster's driver plugins, run as its processes (``driver-<node>``) or recorded as a pod's."""

    def __init__(self, cluster: ClusterCore) -> None:
        self.cluster = cluster

    def _state(self) -> ClusterState:
        st = self.cluster.state()
        if st is None:
            raise ClusterError(f"cluster {self.cluster.name!r} is not up")
        return st

    def dirs(self, node: str) -> dict[str, Path]:
        """The plugin's registrar, plugin and CDI dirs: private ones on a KWOK node, the
        kubelet's and containerd's own on a real node."""
        if node.startswith("real-node-"):
            return realcluster.node(self.cluster, node).driver_dirs
        base = self.cluster.runtime_dir / node
        return {"registrar": base / "plugins_registry", "plugins": base / "plugins", "cdi": base / "cdi"}

    def start(self, node: str) -> None:
        """Start ``node``'s plugin; on a node whose kubelet runs, return once the kubelet registers it
        (see the module's docstring), or after :data:`REGISTRATION_TIMEOUT_S` with a warning."""
        st = self._state()
        if node not in st.spec.all_node_names():
            raise ClusterError(f"node {node!r} is not a node of cluster {self.cluster.name!r}")
        if node in st.driver_pods:
            raise ClusterError(f"the driver on {node} is a DaemonSet's pod: its kubelet starts it, not us")
        dirs = self.dirs(node)
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        supervisor = self.cluster.supervisor
        mark, since = self._kubelet_log_mark(node), time.time()
        if node in st.nvidia:  # the emulated library finds the node's device nodes there (containers: their /dev)
            supervisor.start(f"driver-{node}", commands.nvidia_plugin(st, self.cluster.paths(), node, dirs),
                             env={"DRA_HARNESS_NVML_DEV_ROOT": str(Path(st.nvidia[node]["root"]) / "dev")})
        else:
            supervisor.start(f"driver-{node}", commands.driver(st, self.cluster.paths(), node, dirs, EXAMPLE_DRIVER))
        if mark is not None:
            self._wait_registered(node, dirs["registrar"], mark, since)

    def _kubelet_log_mark(self, node: str) -> int | None:
        """How far the kubelet's log of ``node`` reaches now; None where no kubelet runs (a KWOK node,
        a real node being started or rebooted: its kubelet registers the plugin when it starts)."""
        tracked = self.cluster.supervisor.get(f"kubelet-{node}")
        if tracked is None or not tracked.alive():
            return None
        try:
            return (self.cluster.supervisor.log_dir / f"kubelet-{node}.log").stat().st_size
        except OSError:
            return None

    def _wait_registered(self, node: str, registrar: Path, mark: int, since: float) -> None:
        """Until the kubelet's log, past ``mark``, says it registers a socket in ``registrar`` that it saw
        appear at ``since`` (wall clock) or later: the new plugin's, not a late retry of the stopped one's."""
        path = self.cluster.supervisor.log_dir / f"kubelet-{node}.log"
        started = time.monotonic()
        offset, partial = mark, b""  # each look reads on from where the last stopped; a cut line waits for its end

        def attempt() -> None:
            nonlocal offset, partial
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
            offset += len(chunk)
            *lines, partial = (partial + chunk).split(b"\n")
            if registered_since(b"\n".join(lines).decode(errors="replace"), registrar, since):
                return
            if self.cluster.supervisor.exited(f"driver-{node}") is not None:
                return  # the caller's own checks find the exit and say so
            raise NotYet(f"no {REGISTERING!r} for {registrar} in {path} since the start")

        try:
            until(started + REGISTRATION_TIMEOUT_S, 0.05, log, f"the kubelet on {node} to register its driver")(attempt)
        except (NotYet, OSError) as last:
            log.warning("the kubelet on %s has not registered the restarted driver after %.0fs (%s): a pod placed "
                        "there now may wait for the kubelet's retry", node, REGISTRATION_TIMEOUT_S, last)
            return
        log.info("the kubelet on %s registered the driver %.2fs after its start", node, time.monotonic() - started)

    def configure(self, node: str, config: str) -> None:
        """Restart ``node``'s plugin in ``config`` (``default`` to go back). The plugin reconciles its
        own driver's slices; when the configuration changes the driver name (another device profile),
        nothing would remove the old driver's slices on a KWOK node, so they are deleted here."""
        st = self._state()
        wanted = driver_configs.by_name(config)
        if config != "default" and commands.release(st.driver_version_of(node)) < (0, 4, 0):
            raise ClusterError(f"driver configuration {config!r} needs the example driver v0.4.0 or later; "
                               f"{node} runs v{st.driver_version_of(node)}")
        if node in st.driver_pods:
            raise ClusterError(f"the driver on {node} is a DaemonSet's pod: its configuration is the DaemonSet's")
        if node in st.nvidia:
            raise ClusterError(f"{node} runs NVIDIA's driver: the example driver's configurations do not apply to it")
        before = driver_configs.by_name(st.driver_configs.get(node, "default"))
        self.stop(node)
        self.record_config(node, config)
        if before.driver != wanted.driver:
            kube = self.cluster.kube()
            for s in kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={before.driver},spec.nodeName={node}"):
                kube.delete(rest.RESOURCE_SLICES, s["metadata"]["name"])
        self.start(node)

    def stop(self, node: str, kill: bool = False) -> None:
        """Stop a node's driver: SIGTERM with a grace period, or SIGKILL at once."""
        self.cluster.supervisor.stop(f"driver-{node}", grace=0 if kill else 10, sig=signal.SIGKILL if kill else signal.SIGTERM)

    def hand_to_pod(self, node: str) -> None:
        """Stop ``node``'s driver process for good: a DaemonSet's pod publishes its devices from now on."""
        st = self._state()
        self.stop(node)
        if node not in st.driver_pods:
            st.driver_pods.append(node)
            self.cluster._save(st)

    # -- the record ----------------------------------------------------------------
    def record_swap(self, process: str, entry: dict[str, str]) -> None:
        """Remember that ``process`` now runs another release (``ClusterState.swapped``): a driver
        DaemonSet rolled by its image, which a process swap does not do."""
        st = self._state()
        st.swapped[process] = entry
        self.cluster._save(st)

    def record_nvidia(self, node: str, entry: dict[str, str] | None) -> None:
        """Remember that ``node``'s driver is NVIDIA's plugin (``entry``, as ``ClusterState.nvidia``), or no longer."""
        st = self._state()
        if entry is None:
            st.nvidia.pop(node, None)
        else:
            st.nvidia[node] = entry
        self.cluster._save(st)

    def record_config(self, node: str, config: str) -> None:
        """Remember that ``node``'s driver now runs in ``config``."""
        st = self._state()
        if config == "default":
            st.driver_configs.pop(node, None)
        else:
            st.driver_configs[node] = config
        self.cluster._save(st)


def registered_since(kubelet_log: str, registrar: Path, since: float) -> bool:
    """Whether ``kubelet_log`` says the kubelet registers a socket in ``registrar`` that it saw appear
    at ``since`` (wall clock) or later."""
    wanted = f'"SocketPath":"{registrar}/'
    return any(REGISTERING in line and wanted in line and _socket_seen(line) >= since
               for line in kubelet_log.splitlines())


def _socket_seen(line: str) -> float:
    """The wall-clock time in a registration line's ``"Timestamp"`` (when the kubelet saw the socket); 0 if none."""
    found = _TIMESTAMP.search(line)
    if not found:
        return 0.0
    try:
        return datetime.fromisoformat(found.group(1)).timestamp()
    except ValueError:
        return 0.0


def describe(st: ClusterState) -> dict[str, str]:
    """Each node's driver as ``cluster status`` shows it: the release, its configuration, and where it runs."""
    out = {}
    for node in st.spec.all_node_names():
        if node in st.nvidia:
            out[node] = f"NVIDIA {st.nvidia[node].get('version', '')} on emulated {st.nvidia[node].get('profile', '')} GPUs"
            continue
        form = "its DaemonSet's pod" if node in st.driver_pods else "a process"
        out[node] = f"example v{st.driver_version_of(node)}, configuration {st.driver_configs.get(node, 'default')}, as {form}"
    return out
