"""The cluster's rules, applied to everything the harness creates: one layer, at the API client.

Why: a real staging cluster has rules that a run must follow to establish anything. A managed GPU
pool taints its nodes (``nvidia.com/gpu=present:NoSchedule``) and is selected by a label; a policy
engine refuses namespaces without a ``team`` label and pods without a cost-centre annotation; a
RuntimeClass is required for GPU containers; images come from a mirror behind a pull secret; a
quota demands a PriorityClass. Applying those at each of the harness's builders (pods, Jobs,
Deployments, DaemonSets, probe pods, KWOK's pod, namespaces) would miss the next builder, so
:class:`~dra_harness.kube.rest.Kube` shapes every body it creates through :meth:`ClusterRules.shape`,
and each namespace of a run gets copies of the pull secrets (deleted with it). A server-side dry run (``lint``
of the user's own manifests) is never shaped.

What each rule touches, and why not more:

- tolerations and pod labels, annotations, pull secrets, priority class: every pod (and pod template);
- the node selector and the runtime class: pods that ask for devices (resource claims), the ones meant
  for the GPU pool; a pod without devices (KWOK's, a driver's controller) may run on any node;
- pods meant for the run's own simulated nodes (they tolerate a ``dra-harness.io/`` taint) keep their
  placement: those nodes are the run's, outside the user's pool;
- the pause image: every container that runs it (an air-gapped cluster's mirror).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_harness.errors import InputError
from dra_harness.kube.types import Obj

#: Never pulled on simulated nodes; a real node has it imported locally (``--pause-image``: a mirror of it).
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
#: Kinds whose ``spec.template`` is a pod template.
_WORKLOADS = ("Deployment", "DaemonSet", "Job", "ReplicaSet", "StatefulSet")
_KEY = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
#: The harness's own taints: a pod tolerating one is meant for the run's simulated nodes.
_OWN_TAINT = "dra-harness.io/"


@dataclass(frozen=True)
class ClusterRules:
    tolerations: tuple[Obj, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    namespace_annotations: Mapping[str, str] = field(default_factory=dict)
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    runtime_class: str | None = None
    #: (namespace, name) of each secret copied into the run's namespaces and named in every pod.
    image_pull_secrets: tuple[tuple[str, str], ...] = ()
    priority_class: str | None = None
    pause_image: str | None = None

    def __bool__(self) -> bool:
        return any(bool(getattr(self, f)) for f in self.__dataclass_fields__)

    def shape(self, kind: str, body: Obj) -> Obj:
        """``body`` (a copy) as the cluster's rules want it; unchanged without rules."""
        if not self:
            return body
        body = copy.deepcopy(body)
        if kind == "Namespace":
            meta = body.setdefault("metadata", {})
            meta["labels"] = {**self.namespace_labels, **(meta.get("labels") or {})}
            if self.namespace_annotations:
                meta["annotations"] = {**self.namespace_annotations, **(meta.get("annotations") or {})}
        elif kind == "Pod":
            self._pod(body)
        elif kind in _WORKLOADS and isinstance((body.get("spec") or {}).get("template"), dict):
            self._pod(body["spec"]["template"])
        return body

    def _pod(self, pod: Obj) -> None:
        meta, spec = pod.setdefault("metadata", {}), pod.setdefault("spec", {})
        if self.pod_labels:  # the harness's own labels (the run's) win: the sweep finds pods by them
            meta["labels"] = {**self.pod_labels, **(meta.get("labels") or {})}
        if self.pod_annotations:
            meta["annotations"] = {**self.pod_annotations, **(meta.get("annotations") or {})}
        tolerations = spec.get("tolerations") or []
        ours = any(str(t.get("key", "")).startswith(_OWN_TAINT) for t in tolerations)
        spec["tolerations"] = tolerations + [dict(t) for t in self.tolerations if t not in tolerations]
        if not spec["tolerations"]:
            del spec["tolerations"]
        for_devices = bool(spec.get("resourceClaims")) and not ours
        if self.node_selector and for_devices:
            spec["nodeSelector"] = {**self.node_selector, **(spec.get("nodeSelector") or {})}
        if self.runtime_class and for_devices and not spec.get("runtimeClassName"):
            spec["runtimeClassName"] = self.runtime_class
        if self.image_pull_secrets:
            names = [s.get("name") for s in spec.get("imagePullSecrets") or []]
            spec["imagePullSecrets"] = [*(spec.get("imagePullSecrets") or []),
                                        *({"name": n} for _, n in self.image_pull_secrets if n not in names)]
        if self.priority_class and not spec.get("priorityClassName"):
            spec["priorityClassName"] = self.priority_class
        if self.pause_image:
            for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
                if c.get("image") == PAUSE_IMAGE:
                    c["image"] = self.pause_image

    def describe(self) -> dict[str, Any]:
        """The rules as the report's provenance records them (secrets by name only, never their data)."""
        out: dict[str, Any] = {
            "tolerations": [toleration_text(t) for t in self.tolerations],
            "node_selector": dict(self.node_selector), "namespace_labels": dict(self.namespace_labels),
            "namespace_annotations": dict(self.namespace_annotations), "pod_labels": dict(self.pod_labels),
            "pod_annotations": dict(self.pod_annotations), "runtime_class": self.runtime_class,
            "image_pull_secrets": [f"{ns}/{n}" for ns, n in self.image_pull_secrets],
            "priority_class": self.priority_class, "pause_image": self.pause_image,
        }
        return {k: v for k, v in out.items() if v}


def toleration_text(t: Obj) -> str:
    """kubectl's ``KEY[=VALUE]:EFFECT`` of a toleration (``KEY`` alone for every effect, ``*`` for every taint)."""
    text = t.get("key") or "*"
    if t.get("operator") != "Exists" and t.get("value"):
        text += f"={t['value']}"
    return text + (f":{t['effect']}" if t.get("effect") else "")


def parse_toleration(text: str, where: str = "--toleration") -> Obj:
    """``KEY[=VALUE][:EFFECT]`` as a toleration (``Exists`` without a value); ``*`` tolerates every taint."""
    body, _, effect = text.rpartition(":") if ":" in text else (text, "", "")
    if effect and effect not in EFFECTS:
        raise InputError(f"{where}: the effect must be one of {', '.join(EFFECTS)} (expected KEY[=VALUE][:EFFECT])")
    key, has_value, value = body.partition("=")
    toleration: Obj = {"operator": "Exists"}
    if key != "*":
        if not _KEY.fullmatch(key) or (has_value and not _LABEL_VALUE.fullmatch(value)):
            raise InputError(f"{where}: expected KEY[=VALUE][:EFFECT] with a taint's key and value")
        toleration = {"key": key, "operator": "Equal", "value": value} if has_value else {"key": key, "operator": "Exists"}
    elif has_value:
        raise InputError(f"{where}: '*' (every taint) takes no value")
    if effect:
        toleration["effect"] = effect
    return toleration


def parse_pairs(items: list[str] | tuple[str, ...] | Mapping[str, Any], where: str, label: bool = True
                ) -> dict[str, str]:
    """``KEY=VALUE`` items (or a mapping) as a dict; a label's value is checked as one, an annotation's is free."""
    pairs = items.items() if isinstance(items, Mapping) else [str(i).partition("=")[::2] for i in items]
    out: dict[str, str] = {}
    for key, value in pairs:
        value = "" if value is None else str(value)
        if not _KEY.fullmatch(str(key)) or (label and not _LABEL_VALUE.fullmatch(value)):
            raise InputError(f"{where}: expected KEY=VALUE with a {'label' if label else 'annotation'}'s key"
                             f"{' and value' if label else ''}")
        out[str(key)] = value
    return out


def parse_secret(text: str, where: str = "--image-pull-secret") -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not _NAME.fullmatch(namespace) or not _NAME.fullmatch(name):
        raise InputError(f"{where}: expected NAMESPACE/NAME of a Secret")
    return namespace, name


def parse_name(text: str | None, where: str) -> str | None:
    if text is not None and not _NAME.fullmatch(text):
        raise InputError(f"{where}: expected a Kubernetes object name (lowercase letters, digits, '-' and '.')")
    return text


class ClusterProfileError(InputError):
    """A cluster profile file that cannot be read as the cluster's rules."""


_STRINGS = {"type": "array", "items": {"type": "string"}}
_PAIRS = {"oneOf": [_STRINGS, {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}]}
#: A cluster profile: the rule options' names (without ``--``), each a list (or a mapping for KEY=VALUE ones).
PROFILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "toleration": {"oneOf": [_STRINGS, {"type": "array", "items": {"type": "object"}}]},
        "node-selector": _PAIRS, "namespace-label": _PAIRS, "namespace-annotation": _PAIRS,
        "pod-label": _PAIRS, "pod-annotation": _PAIRS,
        "runtime-class": {"type": "string"}, "image-pull-secret": _STRINGS, "priority-class": {"type": "string"},
        "pause-image": {"type": "string"},
    },
}


def build(values: Mapping[str, Any], profile: str | None = None) -> ClusterRules:
    """The rules from the run's option values (by dest: ``toleration``, ``node_selector``...) added to those of the
    profile file ``profile``; bad input is one line naming the option or the file and key, never its value."""
    from dra_harness import yamlfile  # a leaf; here so that importing the client reads no YAML machinery

    base: dict[str, Any] = {}
    prefix = f"cluster profile {profile}"
    if profile:
        base = yamlfile.load(profile, ClusterProfileError, prefix)
        try:
            yamlfile.validate(base, PROFILE_SCHEMA, ClusterProfileError, prefix)
        except ClusterProfileError:
            raise ClusterProfileError(f"{prefix}: {_schema_problem(base)}") from None

    def both(key: str, parse: Any) -> list[Any]:
        from_file = base.get(key) or []
        if isinstance(from_file, Mapping):
            from_file = [f"{k}={v}" for k, v in from_file.items()]
        given = list(values.get(key.replace("-", "_")) or ())
        return [parse(v, f"{prefix}: {key}[{i}]") for i, v in enumerate(from_file)] + [
            parse(v, f"--{key}") for v in given]

    def toleration(v: Any, where: str) -> Obj:
        if isinstance(v, Mapping):  # a toleration as the API takes it, from a profile file
            if not set(v) <= {"key", "operator", "value", "effect", "tolerationSeconds"}:
                raise ClusterProfileError(f"{where}: a toleration has only key, operator, value, effect, tolerationSeconds")
            return dict(v)
        return parse_toleration(str(v), where)

    def pairs(key: str, label: bool) -> dict[str, str]:
        out: dict[str, str] = {}
        for item in both(key, lambda v, where: (str(v), where)):
            out.update(parse_pairs([item[0]], item[1], label=label))
        return out

    def single(key: str) -> str | None:
        given = values.get(key.replace("-", "_"))
        return given if given is not None else base.get(key)

    return ClusterRules(
        tolerations=tuple(both("toleration", toleration)),
        node_selector=pairs("node-selector", True),
        namespace_labels=pairs("namespace-label", True),
        namespace_annotations=pairs("namespace-annotation", False),
        pod_labels=pairs("pod-label", True),
        pod_annotations=pairs("pod-annotation", False),
        runtime_class=parse_name(single("runtime-class"), "--runtime-class"),
        image_pull_secrets=tuple(both("image-pull-secret", parse_secret)),
        priority_class=parse_name(single("priority-class"), "--priority-class"),
        pause_image=single("pause-image"),
    )


def _schema_problem(data: Mapping[str, Any]) -> str:
    """Which key of a profile is wrong, by its path only (a value may be a secret's name or worse: never quoted)."""
    for key, value in data.items():
        if key not in PROFILE_SCHEMA["properties"]:
            return f"{key}: not a key of a cluster profile (one of {', '.join(PROFILE_SCHEMA['properties'])})"
        expected = PROFILE_SCHEMA["properties"][key]
        if expected.get("type") == "string" and not isinstance(value, str):
            return f"{key}: must be a string"
        if "type" not in expected and not isinstance(value, (list, Mapping)):
            return f"{key}: must be a list (or a mapping of KEY: VALUE)"
        if isinstance(value, list) and any(not isinstance(v, (str, Mapping)) for v in value):
            return f"{key}: every item must be a string"
    return "not a cluster profile"
