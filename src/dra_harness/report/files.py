"""Writing report files: atomically, and never with a secret in them.

A reader (a browser, CI, ``dra-harness diff``) must never see half a file, so every
file goes to a temporary name first and is renamed. Whatever a test recorded or a
command line held, five kinds of credential are blanked before anything is written:
bearer tokens, HTTP Basic ``Authorization`` values, client secrets (``client-secret``,
``client_secret``, ``clientSecret``, as a key or a flag), credentials in URLs
(``https://user:pass@host``) and PEM blocks, besides ``token``/``password`` keys and
kubeconfig key data. The report is meant to be shared, the kubeconfig is not.

The same text reaches files in several encodings: as written, inside a JSON string
(``\"clientSecret\": \"x\"``, ``\n`` for newlines), in XML (junit.xml: ``&quot;``,
``&#10;``) and in HTML (``&#34;``, ``&#39;``). The patterns accept each, and never
consume a quote, backslash or ``<``, so a redacted JSON or XML file still parses.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dra_harness.errors import InputError

#: A quote as written, JSON-escaped, or as an XML/HTML character reference.
_Q = r"(?:\\*[\"']|&(?:quot|apos|#34|#39|#x22|#x27);)?"
#: A newline as written, JSON-escaped (once or more), or as an XML character reference.
_NL = r"(?:\r?\n|\\+[nr]|&#1[03];|&#x[aAdD];)"
#: The body takes single dashes (Proc-Type, DEK-Info headers) but never "-----": a scan stops at the
#: next BEGIN or END, so many unterminated blocks cost linear time, not quadratic.
_PEM = re.compile(rf"-----BEGIN ([A-Z0-9 ]+)-----(?:[A-Za-z0-9+/=:,. \t]|-(?!----)|{_NL})*?-----END \1-----")
#: A PEM block cut short (pytest cuts a failure message after a few lines, indented): from its
#: header to the first character base64 and indentation do not use.
_PEM_HEAD = re.compile(rf"-----BEGIN [A-Z0-9 ]+-----(?:[A-Za-z0-9+/= \t]|{_NL})*")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_BASIC = re.compile(rf"(?i)(authorization{_Q}\s*[:=]\s*{_Q}\s*basic\s+)[A-Za-z0-9._~+/=-]{{4,}}")
#: user:password@ (or a token as the user) in any scheme's URL; greedy, so a password holding '@' goes too.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,30}://)[^\s/?#\"'<>\\]+@")
_FLAGS = r"token|password|client[-_]?secret|client-key|client-certificate"
_KEYS = r"token|password|client[-_]?secret|client-key-data|client-certificate-data|certificate-authority-data"
#: Command-line and YAML/JSON forms of a credential: --token=X, --client-secret X, a recorded
#: argv ["--token", "X"], token: X, "client-key-data": "X", OIDC_CLIENT_SECRET=X (a key may
#: follow '_', as in id_token).
_CREDENTIAL = re.compile(
    rf"(?i)(--?(?:{_FLAGS})(?:[= ]|{_Q}\s*,\s*){_Q}|(?<![A-Za-z0-9])(?:{_KEYS}){_Q}\s*[:=]\s*{_Q})"
    r"([^\s\"',}&\\<]{6,})"
)
REDACTED = "[redacted]"


class RunDirError(InputError):
    """Not a run directory, or one of its files is malformed (one line naming it, for the CLI)."""


def redact(text: str) -> str:
    """``text`` with every credential of the five kinds (and token/password/key data) blanked; idempotent."""
    text = _PEM.sub(REDACTED, text)
    text = _PEM_HEAD.sub(REDACTED, text)
    text = _BASIC.sub(lambda m: m.group(1) + REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    text = _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)
    return _CREDENTIAL.sub(lambda m: m.group(1) + REDACTED, text)


#: What a binary file that held a credential is replaced by: blanking bytes inside it would corrupt it.
WITHHELD = b"[redacted: this binary file held a credential; its content is withheld]\n"


def redact_file(path: Path) -> bool:
    """Blank the credentials in a file written by someone else; True when it changed.

    Text is rewritten only where it changes; bytes that are not UTF-8 survive as they
    were (surrogateescape). A file with a NUL byte (PNG, JPEG, archives) is binary and
    never edited in place, which would corrupt it; should its bytes hold a credential
    anyway, its content is withheld rather than leaked. Links are not followed.
    """
    if path.is_symlink() or not path.is_file():
        return False
    data = path.read_bytes()
    if b"\0" in data:
        as_text = data.decode("latin-1")
        if redact(as_text) == as_text:
            return False
        new = WITHHELD
    else:
        text = data.decode("utf-8", "surrogateescape")
        new = redact(text).encode("utf-8", "surrogateescape")
        if new == data:
            return False
    atomic_write(path, new)
    return True


def redact_files(paths: Iterable[Path]) -> list[Path]:
    """:func:`redact_file` on each; the files that changed."""
    return [p for p in paths if redact_file(p)]


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
