"""Connect to one cluster from a kubeconfig.

One configuration per handle, never the library's global one, so that pytest-xdist
workers and tests pointed at different clusters cannot cross wires. The kubeconfig is
read and checked by :mod:`dra_harness.yamlfile` like every other file a user hands
the harness (binary, empty, alias bomb, wrong types: one line naming the file), and
only then given to the kubernetes client as a dict: the client's own reader would
expand an alias bomb and fail on wrong types with a traceback.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.kube_config import ConfigNode

from dra_harness import yamlfile
from dra_harness.kube.rest import Kube
from dra_harness.errors import InputError


class KubeconfigError(InputError):
    """The kubeconfig is missing, unreadable or names no usable context."""


_STR = {"type": "string"}
_NAMED: dict[str, Any] = {"type": ["array", "null"], "items": {"type": "object", "required": ["name"], "properties": {"name": _STR}}}

#: An exec credential plugin: the client runs ``command`` with ``args`` and ``env``; a string where it wants a list
#: would be split into characters and run, or fail in the client with a message quoting the value.
_EXEC: dict[str, Any] = {"type": "object", "properties": {
    "command": _STR, "apiVersion": _STR, "args": {"type": ["array", "null"], "items": _STR},
    "env": {"type": ["array", "null"], "items": {"type": "object", "required": ["name", "value"],
                                                  "properties": {"name": _STR, "value": _STR}}},
}}

#: The fields the client reads, with their types; everything else a kubeconfig may hold is let through.
KUBECONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": _STR,
        "kind": _STR,
        "current-context": {"type": ["string", "null"]},
        "clusters": {**_NAMED, "items": {**_NAMED["items"], "required": ["name", "cluster"], "properties": {
            "name": _STR,
            "cluster": {"type": "object", "properties": {
                "server": _STR, "certificate-authority": _STR, "certificate-authority-data": _STR,
                "insecure-skip-tls-verify": {"type": "boolean"}, "tls-server-name": _STR, "proxy-url": _STR,
            }},
        }}},
        "contexts": {**_NAMED, "items": {**_NAMED["items"], "required": ["name", "context"], "properties": {
            "name": _STR,
            "context": {"type": "object", "required": ["cluster"],
                        "properties": {"cluster": _STR, "user": _STR, "namespace": _STR}},
        }}},
        "users": {**_NAMED, "items": {**_NAMED["items"], "required": ["name", "user"], "properties": {
            "name": _STR,
            "user": {"type": "object", "properties": {
                "token": _STR, "tokenFile": _STR, "username": _STR, "password": _STR,
                "client-certificate": _STR, "client-certificate-data": _STR,
                "client-key": _STR, "client-key-data": _STR,
                "exec": _EXEC, "auth-provider": {"type": "object", "properties": {"name": _STR, "config": {"type": "object"}}},
            }},
        }}},
    },
}


class _WithheldPluginOutput(logging.Filter):
    """The client logs an exec plugin's failure with the plugin's stderr, which may carry a credential.

    It logs through the root logger (``logging.error``), at load and again at each token refresh. A failure at
    load is dropped and noted for :func:`load_configuration` to turn into a one-line error; one at a refresh is
    logged with a message that names no value.
    """

    WITHHELD = "exec: the kubeconfig's credential plugin failed; its output is withheld (it may carry credentials)"

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.module != "kube_config" or not str(record.msg).startswith("exec:"):
            return True
        first = str(record.msg).split(".")[0]  # 'exec: process returned 1', before the plugin's own words
        failures = getattr(self.local, "failures", None)
        if failures is not None:  # at load: the caller's one-line error says it
            failures.append(first if first.startswith("exec: process returned") else "exec: the plugin's answer is unusable")
            return False
        record.msg, record.args = self.WITHHELD, ()
        return True


_PLUGIN_OUTPUT = _WithheldPluginOutput()


def kubeconfig_files(path: Path | str | None) -> list[str]:
    """The files a kubeconfig argument means: the path, else KUBECONFIG (a list, as kubectl reads it), else ~/.kube/config."""
    if path:
        return [str(path)]
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return listed or [os.path.expanduser("~/.kube/config")]


def _read(file: str) -> dict[str, Any]:
    prefix = f"kubeconfig {file}"
    data = yamlfile.load(file, KubeconfigError, prefix)
    yamlfile.validate(data, KUBECONFIG_SCHEMA, KubeconfigError, prefix)
    return data


def _merged(files: list[str]) -> tuple[dict[str, Any], list[str]]:
    """One kubeconfig from several, as kubectl merges them: the first definition of a name and of current-context win.

    Each entry keeps its own file as its path, so relative certificate paths resolve beside that file.
    """
    present = files if len(files) == 1 else [f for f in files if os.path.exists(f)] or files[:1]
    merged: dict[str, Any] = {"clusters": [], "contexts": [], "users": []}
    for file in present:
        data = _read(file)
        for key in ("clusters", "contexts", "users"):
            seen = {node.value["name"] for node in merged[key]}
            merged[key] += [ConfigNode(f"{file}/{key}", item, file) for item in data.get(key) or [] if item["name"] not in seen]
        if data.get("current-context") and not merged.get("current-context"):
            merged["current-context"] = data["current-context"]
    return merged, present


def _check_context(merged: dict[str, Any], context: str | None, prefix: str) -> None:
    """The chosen context, its cluster and the cluster's server exist (the client's own messages name neither file nor fix).

    The names the file defines are quoted, and so is ``--context`` (the user's own argument); a reference in the
    file that matches no name (current-context, a context's cluster) is not: it may be a credential pasted there.
    """
    contexts = {n.value["name"]: n.value["context"] for n in merged["contexts"]}
    known = ", ".join(sorted(contexts)) or "none"
    name = context or merged.get("current-context")
    if not name:
        raise KubeconfigError(f"{prefix}: no current-context; pass --context (contexts: {known})")
    if name not in contexts:
        which = f"no context {context!r}" if context else "current-context names no context the file defines"
        raise KubeconfigError(f"{prefix}: {which} (contexts: {known})")
    cluster = contexts[name]["cluster"]
    clusters = {n.value["name"]: n.value["cluster"] for n in merged["clusters"]}
    if cluster not in clusters:
        raise KubeconfigError(f"{prefix}: context {name!r} names a cluster it does not define "
                              f"(clusters: {', '.join(sorted(clusters)) or 'none'})")
    if not clusters[cluster].get("server"):
        raise KubeconfigError(f"{prefix}: cluster {cluster!r} has no server")


def load_configuration(path: Path | str | None, context: str | None = None) -> client.Configuration:
    merged, files = _merged(kubeconfig_files(path))
    prefix = f"kubeconfig {' '.join(files)}"
    _check_context(merged, context, prefix)
    configuration = client.Configuration()
    root = logging.getLogger()
    if _PLUGIN_OUTPUT not in root.filters:
        root.addFilter(_PLUGIN_OUTPUT)
    failures: list[str] = []
    _PLUGIN_OUTPUT.local.failures = failures
    try:
        config.load_kube_config_from_dict(
            ConfigNode("kubeconfig", merged, files[0]),
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except (ConfigException, OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        first = (str(e).strip().splitlines() or [e.__class__.__name__])[0]
        raise KubeconfigError(f"{prefix}: {first}") from e
    finally:
        _PLUGIN_OUTPUT.local.failures = None
    if failures:
        raise KubeconfigError(f"{prefix}: {_user_path(merged, context)}.exec: {failures[0].removeprefix('exec: ')}; "
                              "its output is withheld, as it may carry credentials: run the plugin by hand to read it")
    return configuration


def _user_path(merged: dict[str, Any], context: str | None) -> str:
    """The key path of the context's user (``users.N.user``), as the schema's errors name a field."""
    contexts = {n.value["name"]: n.value["context"] for n in merged["contexts"]}
    user = contexts[context or merged["current-context"]].get("user")
    names = [n.value["name"] for n in merged["users"]]
    return f"users.{names.index(user)}.user" if user in names else "users"


def connect(path: Path | str | None, context: str | None = None) -> Kube:
    configuration = load_configuration(path, context)
    try:
        return Kube(configuration)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError: a CA file that is missing or not a certificate
        files = " ".join(kubeconfig_files(path))
        raise KubeconfigError(f"kubeconfig {files}: its certificate authority is unusable: "
                              f"{getattr(e, 'strerror', None) or e}") from e
