"""A corpus of credentials, one of each kind the report must never hold, and a scan for them.

Fresh random values each run, so no fixture or earlier output can match by accident.
The corpus travels to a subprocess test session through an environment variable.
"""

from __future__ import annotations

import base64
import json
import os
import random
import string
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
    #: The random part of a password full of punctuation (commas, '&', '}', ';'), quoted and unquoted.
    punct_password: str
    exec_env_value: str
    aws_key_id: str
    aws_secret: str
    gcp_key_lines: tuple[str, ...]
    azure_secret: str
    azure_account_key: str
    jwt: str
    #: Issue 60: the tail of a YAML single-quoted password after its '' (an escaped quote), the later words of an
    #: unquoted password with spaces, a password of under 6 characters, an env entry whose value precedes its name,
    #: and tokens known by their prefix alone (Vault, GitHub, a Google API key).
    yaml_quote_tail: str
    multiword_tail: str
    short_password: str
    env_value_first: str
    vault_token: str
    github_token: str
    gcp_api_key: str

    @classmethod
    def new(cls) -> Corpus:
        def rand(n: int) -> str:
            return os.urandom(n).hex()

        def b64(n: int) -> str:
            return base64.b64encode(os.urandom(n)).decode()

        def b64url(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).decode().rstrip("=")

        def upper(n: int) -> str:
            return "".join(random.choice(string.ascii_uppercase + string.digits) for _ in range(n))

        def base62(n: int) -> str:
            return "".join(random.choice(string.ascii_letters + string.digits) for _ in range(n))

        pem = tuple(b64(48) for _ in range(3))
        jwt = ".".join([b64url(b'{"alg":"RS256","typ":"JWT"}'), b64url(json.dumps({"sub": rand(8)}).encode()),
                        b64url(os.urandom(32))])
        return cls(bearer="dra" + rand(16), basic_password="pw" + rand(8), client_secret="cs" + rand(12),
                   url_password="up" + rand(8), pem_lines=pem, punct_password="pp" + rand(6),
                   exec_env_value="ev" + rand(10), aws_key_id="AKIA" + upper(16), aws_secret=b64(30),
                   gcp_key_lines=tuple(b64(48) for _ in range(3)),
                   azure_secret=f"{rand(1)}x{random.randint(0, 9)}Q~" + b64url(os.urandom(27))[:34].replace("-", "."),
                   azure_account_key=b64(64), jwt=jwt,
                   yaml_quote_tail="yq" + rand(8), multiword_tail="mw" + rand(8),
                   # 5 characters, in a shape ('%' and '~' between) no other text of a run directory has.
                   short_password=f"{base62(1)}%{base62(1)}~{base62(1)}",
                   env_value_first="vf" + rand(10), vault_token="hvs.CAES" + base62(88), github_token="ghp_" + base62(36),
                   gcp_api_key="AIza" + b64url(os.urandom(27))[:35])

    @classmethod
    def from_env(cls) -> Corpus:
        raw = json.loads(os.environ[ENV])
        return cls(**{**raw, "pem_lines": tuple(raw["pem_lines"]), "gcp_key_lines": tuple(raw["gcp_key_lines"])})

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @property
    def basic(self) -> str:
        return base64.b64encode(f"deploy:{self.basic_password}".encode()).decode()

    @property
    def url(self) -> str:
        return f"https://deploy:{self.url_password}@registry.example.com/v2/"

    @property
    def password(self) -> str:
        """A password of punctuation around the random part: the old patterns stopped at its first ',' or '&'."""
        return f"P@ss,w0rd;&}}!{self.punct_password}"

    @property
    def gcp_service_account(self) -> str:
        """A GCP service-account key file, as JSON (its private key's newlines escaped)."""
        key = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(self.gcp_key_lines) + "\n-----END PRIVATE KEY-----\n"
        return json.dumps({"type": "service_account", "project_id": "p", "private_key": key,
                           "client_email": "ci@p.iam.gserviceaccount.com"})

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
            "password with punctuation": [self.password, self.punct_password],
            "exec plugin env": [self.exec_env_value],
            "AWS keys": [self.aws_key_id, self.aws_secret],
            "GCP service-account key": list(self.gcp_key_lines),
            "Azure secrets": [self.azure_secret, self.azure_account_key],
            "JWT": [self.jwt, self.jwt.split(".")[1]],
            "YAML-escaped password": [self.yaml_quote_tail],
            "multi-word password": [self.multiword_tail],
            "short password": [self.short_password],
            "env value before its name": [self.env_value_first],
            "Vault token": [self.vault_token],
            "GitHub token": [self.github_token],
            "Google API key": [self.gcp_api_key],
        }

    def text(self) -> str:
        """Every kind, in the forms a log, an event or an error message uses."""
        return "\n".join([
            f"GET /apis with Authorization: Bearer {self.bearer}",
            f"proxy said: Authorization: Basic {self.basic}",
            f"oidc: --client-secret={self.client_secret} (clientSecret: {self.client_secret})",
            f"pulling from {self.url}",
            f"key: {self.pem}",
            f'db: {{host: db.internal, password: "{self.password}"}} and psql --password={self.password}',
            "exec plugin env:", "- name: VAULT_TOKEN", f"  value: {self.exec_env_value}",
            f"aws_access_key_id = {self.aws_key_id}", f"aws_secret_access_key = {self.aws_secret}",
            f"credentials file: {self.gcp_service_account}",
            f"sp created with secret {self.azure_secret}; "
            f"DefaultEndpointsProtocol=https;AccountName=ci;AccountKey={self.azure_account_key};EndpointSuffix=core.windows.net",
            f"id token seen in the audit log: {self.jwt}",
            f"ldap: {{host: ldap.internal, password: 'it''s {self.yaml_quote_tail}'}}",
            f"smtp password: correct horse {self.multiword_tail} staple",
            f"redis password: {self.short_password}",
            "exec plugin env, value first:", f"- value: {self.env_value_first}", "  name: GITHUB_TOKEN",
            f"vault login printed {self.vault_token}", f"git remote set-url origin {self.github_token}",
            f"maps client configured with {self.gcp_api_key}",
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
            "- name: eks",
            "  user:",
            "    exec:",
            "      apiVersion: client.authentication.k8s.io/v1beta1",
            "      command: aws",
            "      env:",
            "      - name: AWS_PROFILE",
            "        value: ci",
            "      - name: AWS_SECRET_ACCESS_KEY",
            f"        value: {self.aws_secret}",
            "      - name: VAULT_TOKEN",
            f"        value: {self.exec_env_value}",
            f"      - value: {self.env_value_first}",
            "        name: GITHUB_TOKEN",
            "- name: basic",
            "  user:",
            "    username: ci",
            f"    password: 'it''s {self.yaml_quote_tail}'",
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
