"""No credential reaches a run directory: the patterns, the pass over files, and a real run directory."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from xml.etree import ElementTree
from xml.sax.saxutils import quoteattr

import pytest
import yaml

import dra_harness
from dra_harness.report import failure_evidence, fingerprint
from dra_harness.report.design import load_design
from dra_harness.report.files import REDACTED, WITHHELD, redact, redact_file, write_json
from dra_harness.report.summary import finish_run, start_run, write_report
from tests.unit.report_runs import _png
from tests.unit.secret_corpus import ENV, Corpus, FakeKube, leaks

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(dra_harness.__file__).resolve().parents[1]


def _found(text: str, corpus: Corpus) -> list[str]:
    return [kind for kind, values in corpus.secrets().items() if any(v in text for v in values)]


def test_secrets_are_blanked_whatever_their_form():
    key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----"
    text = redact(f"a {key} b Authorization: Bearer abcdefghijklmnop --token=sekret123456 client-key-data: QUJDREVGR0g=")
    for secret in ("MIIEpAIBAAKCAQEA7", "abcdefghijklmnop", "sekret123456", "QUJDREVGR0g="):
        assert secret not in text


ENCODINGS = {
    "as written": lambda t: t,
    "in a JSON string": json.dumps,
    "in a JSON string in a JSON string": lambda t: json.dumps(json.dumps(t)),
    "in an XML attribute": lambda t: f"<failure message={quoteattr(t)}/>",
    "in HTML": lambda t: f"<td>{html.escape(t)}</td>",
}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_each_kind_of_credential_is_blanked_in_every_encoding_a_report_file_uses(encoding):
    corpus = Corpus.new()
    encoded = ENCODINGS[encoding](corpus.text())
    assert _found(encoded, corpus) == list(corpus.secrets()), "control: the encoded corpus holds every kind"
    clean = redact(encoded)
    assert _found(clean, corpus) == [] and REDACTED in clean
    # Redacting never breaks the file's syntax.
    if encoding.startswith("in a JSON"):
        json.loads(clean)
    if encoding == "in an XML attribute":
        ElementTree.fromstring(clean)


@pytest.mark.parametrize("form", [
    "--client-secret abcdef123456", "client_secret=abcdef123456", '"clientSecret": "abcdef123456"',
    "OIDC_CLIENT_SECRET=abcdef123456", '["--client-secret", "abcdef123456"]',
    "Authorization: Basic abcdef123456", "{'Authorization': 'Basic abcdef123456'}",
    "git clone https://abcdef123456@github.com/org/repo", "ftp://user:abc@def123456@host/file",
    "-----BEGIN CERTIFICATE-----\nabcdef123456",  # cut short: no END line
    '<failure message="key: -----BEGIN RSA PRIVATE KEY-----&#10;  QUJD&#10;  abcdef123456&#10;[+4 more lines">',  # as pytest cuts it
])
def test_each_form_of_a_credential_is_blanked(form):
    assert "abcdef123456" not in redact(form)


@pytest.mark.parametrize("form", [
    'password: "P@ss,w0rd;&}abcdef123456"', "--password=P@ss,w0rd;&abcdef123456", "passwd=a,b}abcdef123456",
    '{"password": "it\\"s,abcdef123456"}', "password: 'x y abcdef123456'", "<p>password: &quot;a&amp;abcdef123456&quot;</p>",
    "- name: AZURE_CLIENT_SECRET\n  value: abcdef123456", '{"name": "VAULT_TOKEN", "value": "abcdef123456"}',
    "aws_secret_access_key = abcdef123456/K7MDENG", "AKIAABCDEF1234567890 key id", "ASIAABCDEF1234567890",
    '{"private_key": "-----BEGIN PRIVATE KEY-----\\nabcdef123456\\n-----END PRIVATE KEY-----\\n"}',
    "sp secret a1b2Q~abcdef123456abcdef123456abcdef12", "AccountName=ci;AccountKey=abcdef123456+/==;EndpointSuffix=x",
    "jwt eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhYmNkZWYxMjM0NTYifQ.abcdef123456",
])
def test_each_new_form_of_a_credential_is_blanked(form):
    """Passwords with punctuation, exec-plugin env values, cloud keys and bare JWTs (issue 34)."""
    clean = redact(form)
    assert "abcdef123456" not in clean and "YWJjZGVmMTIzNDU2" not in clean, clean
    if form.startswith("{"):
        json.loads(clean)  # the file's syntax stays


@pytest.mark.parametrize("form", [
    "password: 'it''s abcdef123456'", "password: 'a''''b''abcdef123456' # rotated",
    "<p>password: &#x27;it&#x27;&#x27;s abcdef123456&#x27;</p>",
    "password: correct horse abcdef123456 staple", "token: two words abcdef123456 # a comment",
    "{password: correct abcdef123456, user: x}",
    "- value: abcdef123456\n  name: VAULT_TOKEN", '{"value": "abcdef123456", "name": "GITHUB_TOKEN"}',
    "E         - value: abcdef123456\nE           name: DB_PASSWORD", "- value: with spaces abcdef123456\n  name: API_KEY",
    "hvs.CAESIabcdef123456abcdef123456abcdef123456", "VAULT_TOKEN=hvb.abcdef123456abcdef123456",
    "ghp_abcdef123456abcdef123456abcdef123456", "https://x.example/?t=gho_abcdef123456abcdef123456abcdef123456",
    "github_pat_11ABCDEFG0abcdef123456_abcdef123456abcdef123456", "maps?key=AIzaSyabcdef123456abcdef123456abcdef123&z=1",
])
def test_each_form_of_a_credential_the_adversarial_review_found_is_blanked(form):
    """A YAML '' escape, a password of several words, an env entry's value before its name, Vault, GitHub and
    Google API tokens (issue 60): each kept some or all of abcdef123456 before."""
    clean = redact(form)
    assert "abcdef123456" not in clean and REDACTED in clean, clean
    if form.startswith('{"'):
        json.loads(clean)  # the file's syntax stays


@pytest.mark.parametrize("form", ["password: ab1", "--token=x", "token: 1234", "passwd=q%w", "secret_access_key = k",
                                  "client-secret: 12", '{"password": "ab"}'])
def test_a_credential_of_under_six_characters_is_blanked(form):
    """A short value went whole (issue 60): the unquoted pattern wanted six characters or more."""
    clean = redact(form)
    assert REDACTED in clean and not any(v in clean for v in ("ab1", "=x", "1234", "q%w", "= k", ": 12", '"ab"')), clean


def test_none_true_and_false_are_not_taken_for_a_short_credential():
    text = "{'token': None, 'password': ''}; \"token\": null, \"password\": false; password: ~; token: true\n"
    assert redact(text) == text


def test_an_exec_plugins_credential_env_goes_and_the_rest_of_the_kubeconfig_stays():
    corpus = Corpus.new()
    clean = redact(corpus.kubeconfig())
    for secret in (corpus.aws_secret, corpus.exec_env_value, corpus.env_value_first, corpus.yaml_quote_tail):
        assert secret not in clean
    assert "name: AWS_PROFILE\n        value: ci" in clean and "command: aws" in clean
    config = yaml.safe_load(clean)  # still a kubeconfig
    env = config["users"][2]["user"]["exec"]["env"]
    assert [e["name"] for e in env] == ["AWS_PROFILE", "AWS_SECRET_ACCESS_KEY", "VAULT_TOKEN", "GITHUB_TOKEN"]
    assert env[0]["value"] == "ci" and config["users"][3]["user"] == {"username": "ci", "password": REDACTED}


def test_ordinary_text_near_the_new_patterns_is_left_alone():
    text = ("- name: LOG_LEVEL\n  value: debug; {\"name\": \"NODE_NAME\", \"value\": \"gpu-node-0\"}; "
            "a password policy needs punctuation; {\"password\": \"\", \"user\": \"alice\"}; "
            "passwordless login; AKIA12 is short; eyJ starts base64 JSON; eyJhbGciOiJSUzI1NiJ9 alone; "
            "a~b Q~ here; image@sha256:4bcd2f8e9a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0; "
            "{password: none}; 0/4 nodes are available")
    assert redact(text) == text


def test_ordinary_report_text_is_left_alone():
    text = ("basic allocation passed; bearer of bad news; token count 3; see https://example.com/a@b "
            "and registry.k8s.io/pause@sha256:abc; 0/4 nodes are available: 4 cannot allocate all claims")
    assert redact(text) == text


def test_many_unterminated_pem_headers_take_linear_time_not_quadratic():
    started = time.monotonic()
    assert redact("-----BEGIN X-----\nAAAA " * 20000).count(REDACTED) == 20000
    assert time.monotonic() - started < 10  # about 0.3 s; scanning from each header to the end ran for minutes


@pytest.mark.parametrize("line", ["value: a " * 20000, "value:" * 100000, "token: a " * 20000, "password: 'a''" * 20000],
                         ids=["value-words", "value-run", "token-words", "quote-escapes"])
def test_a_long_line_of_many_credential_keys_takes_linear_time(line):
    started = time.monotonic()
    redact(line)
    assert time.monotonic() - started < 10  # under 0.3 s each; a value-first env pattern that backed off took 6 minutes


def test_redaction_is_idempotent():
    once = redact(Corpus.new().text())
    assert redact(once) == once


def test_a_png_is_never_edited_and_a_binary_holding_a_credential_is_withheld(tmp_path):
    png = tmp_path / "plot.png"
    png.write_bytes(_png())
    assert not redact_file(png) and png.read_bytes() == _png()
    blob = tmp_path / "core.bin"
    blob.write_bytes(b"\0\x01ELF Authorization: Bearer abcdefghijklmnop\0")
    assert redact_file(blob) and blob.read_bytes() == WITHHELD
    # Text that is not UTF-8 keeps its bytes; only the credential goes.
    latin = tmp_path / "log.txt"
    latin.write_bytes("café token: abcdefghijk\n".encode("latin-1"))
    assert redact_file(latin) and latin.read_bytes() == "café token: [redacted]\n".encode("latin-1")
    link = tmp_path / "link.txt"
    link.symlink_to(latin)
    assert not redact_file(link)


LEAKY_TEST = '''
"""A test session that leaks the corpus everywhere a real one could."""

import os
from pathlib import Path

import allure

from dra_harness.report import failure_evidence
from dra_harness.report.results import slug
from tests.unit.secret_corpus import Corpus, FakeKube

CORPUS = Corpus.from_env()
PNG_BYTES = bytes.fromhex(os.environ["PLOT_PNG"])


def test_a_workload_that_prints_credentials(request, evidence):
    print("echoed command line:", " ".join(CORPUS.argv()))
    print("pod log:", CORPUS.log_line())
    evidence.record(pod_log=CORPUS.log_line(), command=CORPUS.argv())
    allure.attach(PNG_BYTES, name="plot", attachment_type=allure.attachment_type.PNG)
    dump = failure_evidence.collect(FakeKube(CORPUS), "dra-leaky-abcde", "gpu.example.com")
    failure_evidence.save(dump, Path(request.config.getoption("--report-dir")), slug(request.node.nodeid))
    assert False, CORPUS.text()


# The scenario's description (Allure shows a test's docstring) quotes the corpus too.
test_a_workload_that_prints_credentials.__doc__ = "Scenario: " + CORPUS.text()
'''


def _test_session(run: Path, corpus: Corpus, tmp_path: Path) -> subprocess.CompletedProcess:
    """The runner's pytest arguments, on one failing test that leaks the corpus."""
    (tmp_path / "session").mkdir()
    test_file = tmp_path / "session" / "test_leaky.py"
    test_file.write_text(textwrap.dedent(LEAKY_TEST))
    env = {**os.environ, ENV: corpus.to_env(), "PLOT_PNG": _png().hex(),
           "PYTHONPATH": os.pathsep.join([str(SRC), str(ROOT)])}
    args = [sys.executable, "-m", "pytest", str(test_file), f"--run-id=redaction-{os.urandom(4).hex()}", f"--report-dir={run}",
            f"--junitxml={run / 'junit.xml'}", f"--alluredir={run / 'allure-results'}",
            "-p", "no:cacheprovider", "-p", "no:locust",
            "-o", "junit_family=xunit2", "-o", "junit_logging=all", f"--rootdir={tmp_path / 'session'}"]
    return subprocess.run(args, cwd=tmp_path / "session", env=env, capture_output=True, text=True, timeout=300)


def test_no_secret_of_the_corpus_reaches_any_file_of_a_real_run_directory(tmp_path):
    """Kubeconfig and flags on the command line, an event, a pod log, a scenario description: all through the real writers."""
    corpus = Corpus.new()
    run = tmp_path / "run"
    design_file = tmp_path / "design.yaml"
    design = yaml.safe_load((ROOT / "fixtures/designs/example.yaml").read_text())
    design_file.write_text(yaml.safe_dump({**design, "description": "Scenario: " + corpus.text()}))
    # What run_suites does, in its order: claim and start, fingerprint, the test session, finish.
    start_run(run, "redaction-test", corpus.argv(), load_design(design_file))
    sources = {"kube-apiserver": lambda: FakeKube(corpus).request("GET", "/metrics")}
    write_json(run / "fingerprint.json", fingerprint.collect(FakeKube(corpus), sources, corpus.argv(), "existing"))
    write_report(run)
    session = _test_session(run, corpus, tmp_path)
    assert session.returncode == 1, session.stdout[-3000:] + session.stderr[-3000:]
    png = next((run / "allure-results").glob("*-attachment.png")).read_bytes()
    assert png == _png()

    # Control: before the redaction step, the scan finds every kind (pytest's plugins wrote them as they were).
    raw = leaks(run, corpus)
    assert sorted(raw) == sorted(corpus.secrets()), raw
    assert "junit.xml" in raw["client secret"] and any(f.startswith("allure-results/") for f in raw["client secret"])

    finish_run(run, complete=True, exit_code=1)

    assert leaks(run, corpus) == {}
    assert not [p for p in run.rglob("*") if p.is_file() and b"PRIVATE KEY" in p.read_bytes()]
    # The marker shows where each placement went: every file the run writes holds it.
    for name in ("run.json", "design.json", "fingerprint.json", "junit.xml", "evidence.jsonl", "summary.json",
                 "signoff.md", "signoff.html"):
        assert REDACTED in (run / name).read_text(), name
    assert REDACTED in next((run / "failures").glob("*.json")).read_text()
    allure_texts = [p.read_text() for p in (run / "allure-results").iterdir() if p.suffix in (".json", ".txt")]
    assert sum(REDACTED in t for t in allure_texts) >= 3  # the result (message, description), stdout, the dump
    # Nothing was broken on the way: JSON parses, junit.xml still reads as the failed test, the PNG is intact.
    for p in run.rglob("*.json"):
        json.loads(p.read_text())
    assert [json.loads(line)["outcome"] for line in (run / "evidence.jsonl").read_text().splitlines()] == ["failed"]
    summary = json.loads((run / "summary.json").read_text())
    assert [r["outcome"] for r in summary["results"]] == ["failed"] and REDACTED in summary["results"][0]["message"]
    assert summary["results"][0]["failure_dump"]
    assert next((run / "allure-results").glob("*-attachment.png")).read_bytes() == _png()


def test_a_dump_carries_the_driver_log_of_the_nodes_its_pods_ran_on_else_of_nodes_with_devices():
    ran = {"pods": [{"spec": {"nodeName": "n2"}}, {"spec": {}}], "resourceslices": [{"spec": {"nodeName": "n1"}}]}
    assert failure_evidence._driver_logs(ran, lambda node: f"log of {node}") == {"n2": "log of n2"}
    pending = {"pods": [{"spec": {}}], "resourceslices": [{"spec": {"nodeName": n}} for n in ("n9", "n1", "n3", "n2", "n0")]}
    got = failure_evidence._driver_logs(pending, lambda node: "")
    assert list(got) == ["n0", "n1", "n2", "n3"] and set(got.values()) == {failure_evidence.NO_DRIVER_LOG}
