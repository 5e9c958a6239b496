"""Simulated nodes on a cluster we did not create: KWOK as a local process, pointed at its kubeconfig.

Why: contention at scale (mixed-1000 and larger) should run on the user's own API server and
scheduler, not only on ours; their cluster has neither the nodes nor KWOK. So the run starts
KWOK here, built from the module like every component, reaching the cluster through the
kubeconfig the run was given, and managing *only* nodes annotated with this run's tag: never a
real node, never another run's or another KWOK's simulated node (the embedded cluster's own KWOK
selects a different annotation). Its pod stages are the embedded cluster's limited to the run's own
pods (:mod:`.kwok_stages`): a pod's run time is read from the same annotation, and a tenant's pod
that lands on a simulated node fails at once instead of being faked to run. Opt-in (``--allow-contention`` and ``--simulated-nodes``);
the nodes themselves are created by the contention topology, labelled with the run, and swept
with the run's other objects. KWOK's own server listens on loopback only, and the process ends
with the process that started it.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dra_harness import lifetime
from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.errors import ClusterError
from dra_harness.providers import kwok_stages

log = logging.getLogger(__name__)

#: The annotation whose value names the run tag a local KWOK manages.
ANNOTATION = "dra-harness.io/simulated-by"


@dataclass
class LocalKwok:
    """A KWOK process managing the nodes annotated ``ANNOTATION=<tag>`` on the cluster of ``kubeconfig``."""

    kubeconfig: str
    tag: str
    #: Whose pods its stages play (:func:`.kwok_stages.for_run`); any other pod on its nodes fails at once.
    run_id: str
    #: Where its log directory goes: the run's private directory, which a killed run's watchdog removes.
    parent: Path | None = None
    proc: subprocess.Popen | None = None
    log_file: Path | None = None
    #: Stages to play instead of the run's (a negative control plays the shipped ones, which fake every pod).
    stages: Path | None = None

    @property
    def annotation(self) -> tuple[str, str]:
        return ANNOTATION, self.tag

    def start(self) -> LocalKwok:
        binary = builder.build_all([catalog.KWOK])[catalog.KWOK.dirname].binary("kwok")
        # Private (0700), not a predictable path.
        directory = Path(tempfile.mkdtemp(prefix="dra-harness-kwok-", dir=self.parent))
        self.log_file = directory / "kwok.log"
        stages = self.stages or kwok_stages.write(self.run_id, directory)
        argv = [str(binary), f"--kubeconfig={self.kubeconfig}", f"--config={stages}",
                f"--manage-nodes-with-annotation-selector={ANNOTATION}={self.tag}",
                "--cidr=10.245.0.0/16", "--node-ip=127.0.0.1", "--node-lease-duration-seconds=40",
                "--server-address=127.0.0.1:0"]
        with open(self.log_file, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=lifetime.die_with_parent())
        return self

    def check(self) -> None:
        """Raise with KWOK's last line if it has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise ClusterError(f"the local KWOK for simulated nodes exited {self.proc.returncode}: {self.last_line()}")

    def last_line(self) -> str:
        lines = self.log_file.read_text(errors="replace").strip().splitlines() if self.log_file and self.log_file.exists() else []
        return lines[-1][:300] if lines else "no output"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log_file is not None:
            for f in (self.log_file, self.log_file.parent / "stages.yaml", self.log_file.parent):
                try:
                    f.unlink() if f.is_file() else f.rmdir()
                except OSError:
                    pass
