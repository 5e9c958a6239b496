"""A kubeconfig malformed right where its credentials sit: the one line names the field, never the credential.

Issue 60: the schema's one-line error quoted the offending value, so a kubeconfig whose ``users``
was a mapping printed its static token, and a string ``exec:`` printed the plugin's command line
with its secret, into the CI log of ``run`` and ``preflight`` alike. Each kubeconfig here plants a
fresh secret and goes to the installed ``dra-harness`` command as a real process; both commands
fail on reading the kubeconfig, so no cluster is needed. The control: the well-formed file holding
the same secret is read, and the command stops at the server nothing listens on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import dra_harness

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(dra_harness.__file__).resolve().parents[1]
SECRET = "planted" + os.urandom(8).hex()
#: The installed command (the venv's entry point) where there is one, run on this tree's code.
INSTALLED = Path(sys.executable).with_name("dra-harness")
COMMAND = [str(INSTALLED)] if INSTALLED.exists() else [sys.executable, "-m", "dra_harness.cli"]


def _kubeconfig(user: object, users: object = None) -> dict:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            "users": users if users is not None else [{"name": "u", "user": user}]}


def _exec(**fields: object) -> dict:
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "get-token", **fields}}


LEAKY = {
    "users-as-mapping": (_kubeconfig(None, users={"name": "u", "user": {"token": SECRET}}),
                         "users: must be a list or null, not a mapping"),
    "exec-as-string": (_kubeconfig({"exec": f"vault-token --role ci --secret-id {SECRET}"}),
                       "users.0.user.exec: must be a mapping, not a string"),
    "exec-args-as-string": (_kubeconfig(_exec(args=f"--client-secret {SECRET}")),
                            "users.0.user.exec.args: must be a list or null, not a string"),
    "exec-env-value-as-list": (_kubeconfig(_exec(env=[{"name": "VAULT_TOKEN", "value": [SECRET]}])),
                               "users.0.user.exec.env.0.value: must be a string, not a list"),
    "password-as-mapping": (_kubeconfig({"username": "ci", "password": {"value": SECRET}}),
                            "users.0.user.password: must be a string, not a mapping"),
}
COMMANDS = {
    "run": lambda path, tmp: ["run", "--cluster", "existing", "--kubeconfig", str(path), "--report-dir", str(tmp / "out")],
    "preflight": lambda path, tmp: ["preflight", "--kubeconfig", str(path)],
}


def _dra_harness(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("name", LEAKY)
def test_a_kubeconfig_malformed_where_its_credential_sits_never_prints_the_credential(tmp_path, name, command):
    data, says = LEAKY[name]
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(data))
    assert SECRET in path.read_text()
    out = _dra_harness(COMMANDS[command](path, tmp_path))
    assert SECRET not in out.stdout + out.stderr, out.stderr
    assert out.returncode == 2, out
    assert out.stderr.splitlines() == [f"error: kubeconfig {path}: {says}"], out.stderr
    assert not (tmp_path / "out").exists()


#: Credential plugins that fail with the secret in what they print: the client logged their stderr (issue 60).
FAILING_PLUGINS = {
    "stderr": (f"echo 'token {SECRET} expired' >&2; exit 1", "process returned 1"),
    "stdout-not-json": (f"echo 'token {SECRET}'", "the plugin's answer is unusable"),
}
_WORKING_PLUGIN = ('echo \'{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", '
                   f'"status": {{"token": "{SECRET}"}}}}\'')


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("name", FAILING_PLUGINS)
def test_a_credential_plugin_that_fails_with_a_secret_in_its_output_is_named_by_key_path_and_its_output_withheld(
        tmp_path, name, command):
    script, says = FAILING_PLUGINS[name]
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(_kubeconfig(_exec(command="sh", args=["-c", script]))))
    out = _dra_harness(COMMANDS[command](path, tmp_path))
    assert SECRET not in out.stdout + out.stderr, out.stderr
    assert out.returncode == 2, out
    assert out.stderr.splitlines() == [f"error: kubeconfig {path}: users.0.user.exec: {says}; its output is withheld, "
                                       "as it may carry credentials: run the plugin by hand to read it"], out.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_a_credential_plugin_that_answers_is_used_and_the_command_stops_at_the_server(tmp_path, command):
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(_kubeconfig(_exec(command="sh", args=["-c", _WORKING_PLUGIN]))))
    out = _dra_harness(COMMANDS[command](path, tmp_path))
    assert out.returncode != 0 and SECRET not in out.stdout + out.stderr, out
    assert "unreachable" in out.stderr and "kubeconfig" not in out.stderr, out.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_the_well_formed_kubeconfig_with_the_same_secret_is_read_and_the_command_stops_at_the_server(tmp_path, command):
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(_kubeconfig({"token": SECRET})))
    out = _dra_harness(COMMANDS[command](path, tmp_path))
    assert out.returncode != 0 and SECRET not in out.stdout + out.stderr, out
    assert "unreachable" in out.stderr and "kubeconfig" not in out.stderr, out.stderr
