"""A user's values for a driver's Helm chart (``cluster up --provider kind --helm-set/--helm-values``).

Why a module of its own: the CLI checks them before any cluster starts (one line naming the bad
input), and the kind provider records and reports them, with a value whose key names a secret left
out of every file we write.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from dra_harness.errors import InputError

_SECRET_KEY = re.compile(r"(?i)password|token|secret|credential")


def helm_user_args(sets: tuple[str, ...], values: tuple[str, ...]) -> tuple[str, ...]:
    """``--values FILE`` and ``--set KEY=VALUE`` arguments, checked: a file that is not a YAML mapping, or a pair
    without a key, is one InputError line naming it."""
    out: list[str] = []
    for path in values:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            raise InputError(f"--helm-values {path}: not a readable YAML file ({e.__class__.__name__})") from None
        if not isinstance(loaded, dict):
            raise InputError(f"--helm-values {path}: expected a mapping of chart values, got {type(loaded).__name__}")
        out += ["--values", str(Path(path).resolve())]
    for pair in sets:
        key, eq, _ = pair.partition("=")
        if not eq or not key.strip():
            raise InputError(f"--helm-set {pair!r}: expected KEY=VALUE, e.g. kubeletPlugin.gpuPartitions=4")
        out += ["--set", pair]
    return tuple(out)


def shown_helm_args(args: tuple[str, ...]) -> list[str]:
    """The user's chart arguments as recorded and reported: a value whose key names a secret is not written."""
    return [a if "=" not in a or not _SECRET_KEY.search(a.partition("=")[0]) else f"{a.partition('=')[0]}=(not recorded)"
            for a in args]
