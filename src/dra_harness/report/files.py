"""Writing report files: atomically, as new files, and never with a secret in them.

A reader (a browser, CI, ``dra-harness diff``) must never see half a file, so every
file goes to a temporary name first and is renamed. The temporary name is new each time
and created exclusively without following a link, so a link or file planted in a run
directory (one unpacked from someone's artifact) is never written through: the file
written is always a new one in the directory, and the rename replaces a link at the
final name rather than following it. Whatever a test recorded or a
command line held, credentials are blanked before anything is written: bearer tokens,
HTTP Basic ``Authorization`` values, client secrets (``client-secret``, ``client_secret``,
``clientSecret``, as a key or a flag), credentials in URLs (``https://user:pass@host``),
PEM blocks (a GCP service account's ``private_key`` among them), ``token``/``password``
keys whatever punctuation, spaces or length their value has, kubeconfig key data, the values of
credential-named env entries (an exec plugin's ``users[].user.exec.env[]``, value before or
after name), cloud keys (AWS ``AKIA``/``ASIA`` key ids and ``aws_secret_access_key``, Azure
client secrets and ``AccountKey``, Google ``AIza`` API keys), Vault and GitHub tokens and bare
JWTs. The report is meant to be shared, the kubeconfig is not.

The same text reaches files in several encodings: as written, inside a JSON string
(``\"clientSecret\": \"x\"``, ``\n`` for newlines), in XML (junit.xml: ``&quot;``,
``&#10;``) and in HTML (``&#34;``, ``&#39;``). The patterns accept each, and never
consume a quote, backslash or ``<``, so a redacted JSON or XML file still parses.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# RunDirError lives with the reader (which raises it) and is re-exported here, where the report's modules import it.
from dra_harness.report.reading import RunDirError as RunDirError
from dra_harness.report.reading import read_bytes

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
_FLAGS = r"token|password|passwd|client[-_]?secret|client-key|client-certificate"
_KEYS = (r"token|password|passwd|passphrase|client[-_]?secret|client-key-data|client-certificate-data|"
         r"certificate-authority-data|private[-_]?key|secret[-_]?access[-_]?key|account[-_]?key|shared[-_]?access[-_]?key")
#: Where a credential's value starts: --token=X, --client-secret X, a recorded argv ["--token", "X"], token: X,
#: "client-key-data": "X", OIDC_CLIENT_SECRET=X, aws_secret_access_key = X (a key may follow '_', as in id_token).
_LEAD = rf"(?i)(--?(?:{_FLAGS})(?:[= ]|{_Q}\s*,\s*)|(?<![A-Za-z0-9])(?:{_KEYS}){_Q}\s*[:=]\s*)"
#: A quoted value runs to the closing quote of the form it opened with (an escaped quote of that form inside it
#: included, and a doubled one: YAML's 'it''s'), so a password with commas, '&', '}' or spaces goes whole and the
#: file's syntax stays. At most 1024 characters: a quote never closed on its line costs a bounded scan, not one to
#: the end of the file.
_QUOTED = re.compile(_LEAD + r"""(\\*["']|&(?:quot|apos|#34|#39|#x22|#x27);)((?:\2\2|(?!\2)(?:\\.|[^\\\n])){1,1024})(?=\2)""")
#: An unquoted value stops at a space, a quote, a backslash, '<' or an XML/HTML quote or newline reference; a
#: ',' or '}' only where more of the value follows (not a YAML flow mapping's separator or end: "{password: x}; ...").
_UNQUOTED = r"""(?:[^\s"',}&\\<]|&(?!quot;|apos;|\#)|[,}](?=[^\s"',}&\\<;\])]))"""
#: Not a credential however short: what YAML, JSON and Python print for "none" ({'token': None}, "token": null).
_NO_VALUE = r"""(?!(?:null|none|nil|true|false|~)(?:[\s"',}&\\<;\])]|$))"""
#: Any length: a 4-character password is still one.
_CREDENTIAL = re.compile(_LEAD + rf"({_NO_VALUE}{_UNQUOTED}+)")
#: After "key:" (YAML, a log) a plain value runs to the end of the line, spaces and all ("password: correct horse
#: battery staple"), up to a YAML comment; a flag's or an "X=" value is one word of a command line.
_CREDENTIAL_WORDS = re.compile(rf"(?i)((?<![A-Za-z0-9])(?:{_KEYS}){_Q}[ \t]*:[ \t]*)"
                               rf"({_NO_VALUE}{_UNQUOTED}+(?:[ \t]+(?!#){_UNQUOTED}+)*)")
#: Names an environment variable holding a credential is given (AWS_SECRET_ACCESS_KEY, VAULT_TOKEN, DB_PASSWORD).
_SECRET_NAME = r"[A-Za-z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE_KEY|ACCESS_KEY|API_KEY|AUTH)[A-Za-z0-9_]*"
#: An env entry's value (an exec credential plugin's users[].user.exec.env[], or a pod's) when its name is such a name:
#: "- name: X\n  value: V" in YAML (pytest's failure text puts "E" at the start of each line), {"name": "X", "value": "V"}
#: in JSON; in either order. The value runs over spaces to its quote or the end of the line ("value: a b c").
_ENV_CHAR = r"""(?:[^\s"'\\<&]|&(?!quot;|apos;|\#))"""
_ENV_V = rf"(?:{_ENV_CHAR}+(?:[ \t]+(?!#){_ENV_CHAR}+)*)"
#: Between one field of the entry and the next: ", " in JSON, a newline and indentation in YAML.
_ENV_SEP = rf"{_Q}(?:\s*,\s*{_Q}|\s*{_NL}(?:[E>|]\s)?[\s-]*)"
_ENV_VALUE = re.compile(rf"(?i)(name{_Q}\s*:\s*{_Q}{_SECRET_NAME}{_ENV_SEP}value{_Q}\s*:\s*{_Q})({_ENV_V})")
#: Value first, the name must follow in the same entry: never across a "- " to the next entry's name. The value is
#: taken whole (an atomic group), at most 1024 characters and never over another "value:": backing off it to retry
#: the name after each shorter prefix, or rescanning from each "value:" of a long line, cost minutes on a line of
#: "value: x value: x ...".
_ENV_FIRST_CHAR = rf"(?:(?!value{_Q}\s*:){_ENV_CHAR})"
_ENV_VALUE_FIRST = re.compile(rf"(?i)((?<![A-Za-z0-9_])value{_Q}\s*:\s*{_Q})"
                              rf"((?>{_ENV_FIRST_CHAR}(?:{_ENV_FIRST_CHAR}|[ \t]+(?![\s#])){{0,1023}}))"
                              rf"(?={_Q}(?:\s*,\s*{_Q}|[ \t]*{_NL}(?:[E>|]\s)?[ \t]*)name{_Q}\s*:\s*{_Q}{_SECRET_NAME}(?![A-Za-z0-9_]))")
#: Cloud keys that need no key name: AWS access key ids (long-lived AKIA, temporary ASIA), Azure AD client secrets
#: (three characters, a digit, "Q~", 31 to 34 more), and bare JWTs (header.payload.signature, each base64url).
_CLOUD_KEY = re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|(?<![A-Za-z0-9_~.-])[A-Za-z0-9_.-]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])")
#: Tokens whose prefix says what they are: HashiCorp Vault (hvs. service, hvb. batch, hvr. recovery), GitHub
#: (ghp_ classic, gho_ OAuth, ghu_/ghs_ app, ghr_ refresh, github_pat_ fine-grained) and Google API keys (AIza).
_PREFIXED_TOKEN = re.compile(r"(?<![A-Za-z0-9_])(?:hv[sbr]\.[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}|"
                             r"github_pat_[A-Za-z0-9_]{20,}|AIza[0-9A-Za-z_-]{35})")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")
REDACTED = "[redacted]"


def redact(text: str) -> str:
    """``text`` with every credential of the kinds above blanked; idempotent."""
    text = _PEM.sub(REDACTED, text)
    text = _PEM_HEAD.sub(REDACTED, text)
    text = _BASIC.sub(lambda m: m.group(1) + REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    text = _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _JWT.sub(REDACTED, text)
    text = _CLOUD_KEY.sub(REDACTED, text)
    text = _PREFIXED_TOKEN.sub(REDACTED, text)
    text = _ENV_VALUE.sub(lambda m: m.group(1) + REDACTED, text)
    text = _ENV_VALUE_FIRST.sub(lambda m: m.group(1) + REDACTED, text)
    text = _QUOTED.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _CREDENTIAL_WORDS.sub(lambda m: m.group(1) + REDACTED, text)
    return _CREDENTIAL.sub(lambda m: m.group(1) + REDACTED, text)


#: What a binary file that held a credential is replaced by: blanking bytes inside it would corrupt it.
WITHHELD = b"[redacted: this binary file held a credential; its content is withheld]\n"


def redact_file(path: Path) -> bool:
    """Blank the credentials in a file written by someone else; True when it changed.

    Text is rewritten only where it changes; bytes that are not UTF-8 survive as they
    were (surrogateescape). A file with a NUL byte (PNG, JPEG, archives) is binary and
    never edited in place, which would corrupt it; should its bytes hold a credential
    anyway, its content is withheld rather than leaked. Links, FIFOs and devices are not
    the run's and are left alone (whatever reads them refuses them); a file over the
    cap is refused (:func:`~dra_harness.report.reading.read_bytes`), never read whole.
    """
    if path.is_symlink() or not path.is_file():
        return False
    data = read_bytes(path)
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
    """Write ``path`` whole (text redacted, as UTF-8) as a new file: a fresh temporary name, created exclusively
    and never through a link (a file or link already at that name is an error), then renamed over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = redact(data).encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    atomic_write(path, json.dumps(obj, indent=2, default=str) + "\n")
