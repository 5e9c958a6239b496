"""The options a run takes, defined once: the pytest plugin declares them, the CLI's
``run`` offers them, and the CLI hands them to the test session.

Why one table: the same option used to be written three times (click, pytest's
``addoption``, and the argv the runner built), and they drifted (``--k8s-version`` had
different choices in different places). Each :class:`Option` here is turned into a
pytest option by :mod:`dra_harness.plugin.pytest_plugin`, into a click option by
:mod:`dra_harness.cli.run`, and back into pytest arguments by :func:`to_pytest_args`.
Inside the run the values are one typed :class:`RunConfig`, read as attributes: a misspelt
name is a type error, not a silent ``None`` (a unit test keeps the class and the table equal).
"""

from __future__ import annotations

from collections.abc import Mapping
import functools
from dataclasses import dataclass, fields
from typing import Any

from dra_harness.components.catalog import DEFAULT_KUBERNETES_VERSION, KUBERNETES_VERSIONS
from dra_harness.kube import rules
from dra_harness.kube.rules import PAUSE_IMAGE
from dra_harness.labels import DISRUPTABLE_LABEL

#: The kinds of cluster a run can target (the provider registry holds one provider per name).
PROVIDER_NAMES = ("local", "existing", "kind")


#: How long a run's Leases last unrenewed, unless ``--lease-seconds`` says otherwise (:mod:`dra_harness.providers.lock`):
#: a holder that stops renewing (killed) is ignored this long after a waiter first sees its Lease unchanged.
LEASE_SECONDS = 45


@dataclass(frozen=True)
class Option:
    flag: str
    help: str
    default: Any = None
    type: type = str
    choices: tuple[str, ...] | None = None
    #: Inclusive bounds of an int option.
    range: tuple[int, int] | None = None
    metavar: str | None = None
    #: "dir": a directory the CLI refuses, in one line, to take a file for. Files given by the user
    #: are left to their one reader (:mod:`dra_harness.yamlfile`), which names what is wrong with them.
    path: str | None = None
    #: Also offered by ``dra-harness run`` (the rest are pytest-only, passed after the options).
    on_run: bool = True
    #: Repeatable (``--toleration A --toleration B``): a tuple of strings in :class:`RunConfig`.
    multiple: bool = False

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def is_flag(self) -> bool:
        return self.type is bool


OPTIONS: tuple[Option, ...] = (
    Option("--cluster", "local: embedded cluster (default); existing: --kubeconfig; kind: a kind cluster",
           default="local", choices=PROVIDER_NAMES),
    Option("--kubeconfig", "kubeconfig of an existing cluster (default: KUBECONFIG)"),
    Option("--context", "kubeconfig context of an existing cluster"),
    Option("--driver", "driver profile (example, nvidia) or driver name; detected on existing clusters by default"),
    Option("--driver-daemonset", "the DaemonSet running the driver's kubelet plugin, when not where its profile says",
           metavar="NAMESPACE/NAME"),
    Option("--k8s-version", f"Kubernetes version of the embedded or kind cluster (default {DEFAULT_KUBERNETES_VERSION})",
           choices=KUBERNETES_VERSIONS),
    Option("--cluster-name", "use the running embedded or kind cluster of this name (left running at the end)",
           on_run=False),
    Option("--nodes", "simulated GPU nodes of the embedded cluster (kind: workers)", default=4, type=int, range=(1, 64)),
    Option("--gpus-per-node", "devices per node", default=8, type=int, range=(1, 64)),
    # No default: `run` gives the embedded cluster one real node where this host can run it (root, prerequisites)
    # and says in one line why not otherwise; a pytest session given none has none.
    Option("--real-nodes", "nodes with a real kubelet and containerd in the embedded cluster (root; run: 1 where this "
           "host can, else 0 with the reason)", type=int, range=(0, 4)),
    Option("--expected-hardware", "YAML file of the hardware the cluster should publish (default: what the provider started)"),
    Option("--run-id", "label value marking every object of this run", on_run=False),
    Option("--report-dir", "directory for evidence.jsonl and the reports (default: reports/out/<run-id>)", path="dir"),
    Option("--keep-on-failure", "keep a failed test's namespace (labelled dra-harness.io/kept=true) for inspection",
           type=bool),
    Option("--tenant-label", "pod label that names a tenant (sharing audit)", default="tenant"),
    Option("--allow-disruptive", "on a cluster the run did not create, let disruptive tests restart drivers on, drain and "
           f"taint nodes labelled {DISRUPTABLE_LABEL}=true", type=bool),
    Option("--allow-contention", "on a cluster the run did not create, let the contention suite add up to "
           "--simulated-nodes KWOK nodes (run by a local KWOK that manages only them) and run its jobs there", type=bool),
    Option("--simulated-nodes", "with --allow-contention: the most simulated nodes the contention suite may add",
           default=0, type=int, range=(0, 200)),
    Option("--kwok-image", "with --simulated-nodes: run the run's KWOK in the cluster as a Deployment of this image "
           "(the nodes must be able to pull it; `dra-harness components kwok-image` writes it) instead of as a local process"),
    Option("--kwok-node-selector", "with --kwok-image: KEY=VALUE, the label of the nodes its pod may run on (a real node)"),
    Option("--lease-namespace", "namespace of the Leases through which concurrent runs on one cluster take turns",
           default="default"),
    Option("--lease-seconds", "how long the run's Leases last unrenewed: another run takes over one this long after "
           "it stops renewing (a run killed outright), and the run stops its test once it could not renew for two "
           "thirds of it (an API server away that long)", default=LEASE_SECONDS, type=int, range=(10, 3600)),
    Option("--dry-run", "disruptive tests list what they would touch, and touch nothing", type=bool),
    Option("--kind-node-image", "kind: node image (default: built here for --k8s-version by `dra-harness kind build-node-image`)"),
    Option("--driver-image", "kind: example-driver image (default: built from the Go-built plugin)"),
    Option("--kind-install", "kind: install the driver with its own Helm chart (auto, helm) or our manifests",
           default="auto", choices=("auto", "helm", "manifests")),
    Option("--shell-image", "image with a POSIX shell for the container-level checks (default docker.io/library/busybox:1.36; "
           "on an air-gapped cluster, your mirror of it)"),
    Option("--probe-image", "image with Python and nvidia-ml-py for the NVML probe pod (real GPUs, nvidia profile)"),
    Option("--pause-image", f"the image of pods that only hold devices (default {PAUSE_IMAGE}; an air-gapped cluster's "
           "mirror of it)"),
    # The cluster's rules (dra_harness.kube.rules): applied to everything the run creates.
    Option("--cluster-profile", "YAML file of the cluster's rules, with the keys of the options below (toleration, "
           "node-selector, ...), so a team writes them once; options given too add to it", metavar="FILE"),
    Option("--toleration", "a toleration for every pod the run creates, kubectl's KEY[=VALUE][:EFFECT] (a managed GPU "
           "pool's taint: nvidia.com/gpu:NoSchedule); repeatable", multiple=True),
    Option("--node-selector", "KEY=VALUE: the label of the GPU pool, for every pod that asks for devices; repeatable",
           multiple=True),
    Option("--namespace-label", "KEY=VALUE on every namespace the run creates (a policy's team label); repeatable",
           multiple=True),
    Option("--namespace-annotation", "KEY=VALUE on every namespace the run creates; repeatable", multiple=True),
    Option("--pod-label", "KEY=VALUE on every pod the run creates; repeatable", multiple=True),
    Option("--pod-annotation", "KEY=VALUE on every pod the run creates; repeatable", multiple=True),
    Option("--runtime-class", "RuntimeClass for every pod that asks for devices (a cluster that requires one for GPUs)"),
    Option("--image-pull-secret", "NAMESPACE/NAME of a Secret copied into each namespace the run creates (deleted with "
           "it) and named by every pod; its data is never written anywhere; repeatable", multiple=True),
    Option("--priority-class", "PriorityClass for the run's pods that name none (a quota that demands one)"),
    Option("--min-established", "the share of the selected checks, in percent, that must be established for exit 0; "
           "below it the run exits 3, saying what was missing", default=50, type=int, range=(0, 100)),
)

BY_DEST = {o.dest: o for o in OPTIONS}


def to_pytest_args(values: Mapping[str, Any]) -> list[str]:
    """``--flag=value`` for every option in ``values`` (by dest) that differs from its default."""
    args = []
    for dest, value in values.items():
        option = BY_DEST[dest]
        if option.multiple:
            args += [f"{option.flag}={v}" for v in value or ()]
        elif option.is_flag:
            if value:
                args.append(option.flag)
        elif value is not None and value != option.default:
            args.append(f"{option.flag}={value}")
    return args


@dataclass(frozen=True)
class RunConfig:
    """The run's options as typed attributes: one per :data:`OPTIONS` entry (by dest), with the same default."""

    cluster: str = "local"
    kubeconfig: str | None = None
    context: str | None = None
    driver: str | None = None
    driver_daemonset: str | None = None
    k8s_version: str | None = None
    cluster_name: str | None = None
    nodes: int = 4
    gpus_per_node: int = 8
    real_nodes: int | None = None
    expected_hardware: str | None = None
    run_id: str | None = None
    report_dir: str | None = None
    keep_on_failure: bool = False
    tenant_label: str = "tenant"
    allow_disruptive: bool = False
    allow_contention: bool = False
    simulated_nodes: int = 0
    kwok_image: str | None = None
    kwok_node_selector: str | None = None
    lease_namespace: str = "default"
    lease_seconds: int = LEASE_SECONDS
    dry_run: bool = False
    kind_node_image: str | None = None
    driver_image: str | None = None
    kind_install: str = "auto"
    shell_image: str | None = None
    probe_image: str | None = None
    pause_image: str | None = None
    cluster_profile: str | None = None
    toleration: tuple[str, ...] = ()
    node_selector: tuple[str, ...] = ()
    namespace_label: tuple[str, ...] = ()
    namespace_annotation: tuple[str, ...] = ()
    pod_label: tuple[str, ...] = ()
    pod_annotation: tuple[str, ...] = ()
    runtime_class: str | None = None
    image_pull_secret: tuple[str, ...] = ()
    priority_class: str | None = None
    min_established: int = 50

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> RunConfig:
        """From values by dest (pytest's options, the CLI's); a None takes the option's default."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"not run options: {', '.join(unknown)}")
        given: dict[str, Any] = {k: tuple(v) if BY_DEST[k].multiple else v for k, v in values.items() if v is not None}
        return cls(**given)


#: The options that are the cluster's rules (:mod:`dra_harness.kube.rules`), beside ``--cluster-profile``.
RULE_OPTIONS = ("toleration", "node_selector", "namespace_label", "namespace_annotation", "pod_label", "pod_annotation",
                "runtime_class", "image_pull_secret", "priority_class", "pause_image")


@functools.cache  # a RunConfig is frozen: its profile file is read once per process
def cluster_rules(config: RunConfig) -> rules.ClusterRules:
    """The cluster's rules the run applies to everything it creates: the profile file's, and the options' added."""
    return rules.build({dest: getattr(config, dest) for dest in RULE_OPTIONS}, config.cluster_profile)
