"""A corpus of credentials, one of each kind the report must never hold, and a scan for them.

Fresh random values each run, so no fixture or earlier output can match by accident.
The corpus travels to a subprocess test session through an environment variable.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dra_harness.kube import rest

ENV = "DRA_HARNESS_SECRET_CORPUS"


@dataclass(frozen=True)
class Corpus:
    bearer: str
    basic_password: str
    client_secret: str
    url_password: str
    pem_lines: tuple[str, ...]

    @classmethod
    def new(cls) -> Corpus:
        def rand(n: int) -> str:
            return os.urandom(n).hex()

        pem = tuple(base64.b64encode(os.urandom(48)).decode() for _ in range(3))
        return cls(bearer="dra" + rand(16), basic_password="pw" + rand(8), client_secret="cs" + rand(12),
                   url_password="up" + rand(8), pem_lines=pem)

    @classmethod
    def from_env(cls) -> Corpus:
        raw = json.loads(os.environ[ENV])
        return cls(**{**raw, "pem_lines": tuple(raw["pem_lines"])})

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @property
    def basic(self) -> str:
        return base64.b64encode(f"deploy:{self.basic_password}".encode()).decode()

    @property
    def url(self) -> str:
        return f"https://deploy:{self.url_password}@registry.example.com/v2/"

    @property
    def pem(self) -> str:
        return "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(self.pem_lines) + "\n-----END RSA PRIVATE KEY-----"

    def secrets(self) -> dict[str, list[str]]:
        """Kind -> the strings that must appear in no file."""
        return {
            "bearer token": [self.bearer],
            "HTTP Basic": [self.basic, self.basic_password],
            "client secret": [self.client_secret],
            "URL credentials": [self.url_password],
            "PEM block": list(self.pem_lines),
        }

    def text(self) -> str:
        """Every kind, in the forms a log, an event or an error message uses."""
        return "\n".join([
            f"GET /apis with Authorization: Bearer {self.bearer}",
            f"proxy said: Authorization: Basic {self.basic}",
            f"oidc: --client-secret={self.client_secret} (clientSecret: {self.client_secret})",
            f"pulling from {self.url}",
            f"key: {self.pem}",
        ])

    def log_line(self) -> str:
        return f"level=info msg=\"connected\" registry={self.url} header=\"Authorization: Bearer {self.bearer}\""

    def kubeconfig(self) -> str:
        """Kubeconfig content with the credentials embedded (an OIDC user, a token user)."""
        return "\n".join([
            "apiVersion: v1", "kind: Config",
            "users:",
            "- name: oidc",
            "  user:",
            "    auth-provider:",
            "      config:",
            f"        client-secret: {self.client_secret}",
            f"        idp-issuer-url: {self.url}",
            "- name: bot",
            "  user:",
            f"    token: {self.bearer}",
            f"    client-key-data: {self.pem_lines[0]}",
        ])

    def argv(self) -> list[str]:
        """A command line that echoes a kubeconfig path and content, a flag's value as its own argument."""
        return ["dra-harness", "run", "--cluster", "existing", "--kubeconfig", f"{self.url}kubeconfig",
                "--client-secret", self.client_secret, f"--token={self.bearer}", "-H", f"Authorization: Basic {self.basic}",
                self.kubeconfig(), self.pem]


def leaks(root: Path, corpus: Corpus) -> dict[str, list[str]]:
    """Kind -> the files (relative) under ``root`` whose bytes hold one of its secrets; every file, binary included."""
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for kind, values in corpus.secrets().items():
            if any(v.encode() in data for v in values):
                found.setdefault(kind, []).append(path.relative_to(root).as_posix())
    return found


class FakeKube:
    """Just enough of :class:`dra_harness.kube.rest.Kube` for a failure dump and a fingerprint.

    The namespace's event and pod status quote the corpus, as a workload's output
    reaches the API; every other read is empty, and raw requests fail with the corpus
    in the error, as a proxy's error page might.
    """

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus

    def list(self, res: Any, namespace: str | None = None, field_selector: str | None = None,
             label_selector: str | None = None) -> list[dict]:
        if res is rest.EVENTS:
            return [{"metadata": {"name": "ev1", "namespace": namespace}, "reason": "Failed", "type": "Warning",
                     "message": f"Failed to pull image: {self.corpus.text()}"}]
        if res is rest.PODS and field_selector != "status.phase=Pending":
            terminated = {"exitCode": 1, "message": self.corpus.log_line()}
            return [{"metadata": {"name": "leaky", "namespace": namespace}, "spec": {"containers": [{"name": "c"}]},
                     "status": {"phase": "Failed", "containerStatuses": [{"name": "c", "state": {"terminated": terminated}}]}}]
        return []

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        raise rest.ApiError(502, "Bad Gateway", f"{method} {path}: {self.corpus.text()}")
