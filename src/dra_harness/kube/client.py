"""Connect to one cluster from a kubeconfig.

One configuration per handle, never the library's global one, so that pytest-xdist
workers and tests pointed at different clusters cannot cross wires.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from .rest import Kube


class KubeconfigError(RuntimeError):
    """The kubeconfig is missing, unreadable or names no usable context."""


def load_configuration(path: Path | str | None, context: str | None = None) -> client.Configuration:
    if path is not None and not Path(path).is_file():
        raise KubeconfigError(f"kubeconfig {path} does not exist")
    configuration = client.Configuration()
    try:
        config.load_kube_config(
            config_file=str(path) if path else None,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise KubeconfigError(f"kubeconfig {path}:{where} is not valid YAML") from e
    except (ConfigException, OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        first = (str(e).strip().splitlines() or [e.__class__.__name__])[0]
        raise KubeconfigError(f"kubeconfig {path or '~/.kube/config'}: {first}") from e
    return configuration


def connect(path: Path | str | None, context: str | None = None) -> Kube:
    return Kube(load_configuration(path, context))

