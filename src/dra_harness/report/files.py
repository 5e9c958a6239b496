"""Writing report files: atomically, and never with a secret in them.

A reader (a browser, CI, ``dra-harness diff``) must never see half a file, so every
file goes to a temporary name first and is renamed. Whatever a test recorded or a
command line held, PEM blocks and bearer tokens are blanked before anything is
written: the report is meant to be shared, the kubeconfig is not.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]+-----.*?-----END [A-Z0-9 ]+-----", re.S)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
#: Command-line and YAML/JSON forms of a credential: --token=X, token: X, "client-key-data": "X".
_CREDENTIAL = re.compile(
    r"(?i)(--?(?:token|password|client-key|client-certificate)[= ]|"
    r"\b(?:token|password|client-key-data|client-certificate-data|certificate-authority-data)[\"']?\s*[:=]\s*[\"']?)"
    r"([^\s\"',}]{6,})"
)
REDACTED = "[redacted]"


class RunDirError(ValueError):
    """Not a run directory, or one of its files is malformed (one line naming it, for the CLI)."""


def redact(text: str) -> str:
    text = _PEM.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    return _CREDENTIAL.sub(lambda m: m.group(1) + REDACTED, text)


def atomic_write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    if isinstance(data, str):
        tmp.write_text(redact(data))
    else:
        tmp.write_bytes(data)
    os.replace(tmp, path)


def write_json(path: Path, obj: Any) -> None:
    atomic_write(path, json.dumps(obj, indent=2, default=str) + "\n")
