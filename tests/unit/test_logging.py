"""What the harness did to a cluster can be read back from its log, and the log holds no secret.

The REST client is pointed at a small local HTTP server that answers like an API server
(canned JSON, the status codes a test asks for) and records what it was sent, so these
tests see the real client's real calls without a cluster.
"""

from __future__ import annotations

import json
import logging
import secrets
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner
from kubernetes import client

from dra_harness.cli import logs
from dra_harness.cli.app import main
from dra_harness.kube import rest
from dra_harness.providers.handle import grant_namespace_role

SECRETS = rest.Resource("", "v1", "secrets", "Secret", True)


class FakeApiServer(ThreadingHTTPServer):
    """Answers ``(method, path)`` from ``routes``: a (status, body) pair, or a list of them served in turn
    (the last one repeats). Unrouted calls answer 404 NotFound. Every request is kept in ``seen``."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes: dict[tuple[str, str], object] = {}
        self.seen: list[tuple[str, str, bytes, dict[str, str]]] = []

    def answer(self, method: str, path: str) -> tuple[int, dict]:
        route = self.routes.get((method, path))
        if route is None:
            return 404, {"kind": "Status", "reason": "NotFound", "message": f"{path} not found", "code": 404}
        if isinstance(route, list):
            return route.pop(0) if len(route) > 1 else route[0]
        return route  # type: ignore[return-value]


class _Handler(BaseHTTPRequestHandler):
    server: FakeApiServer

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path = self.path.split("?")[0]
        self.server.seen.append((self.command, self.path, body, {k.lower(): v for k, v in self.headers.items()}))
        status, answer = self.server.answer(self.command, path)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

    def log_message(self, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def api():
    server = FakeApiServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def token() -> str:
    return "tok-" + secrets.token_hex(16)


@pytest.fixture
def kube(api, token) -> rest.Kube:
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{api.server_address[1]}"
    configuration.api_key = {"authorization": f"Bearer {token}"}  # as a kubeconfig's token loads
    return rest.Kube(configuration)


def _lines(caplog, logger: str = "dra_harness.kube", level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == level]


def test_a_create_and_a_delete_each_log_one_info_line_with_verb_kind_name_and_status(api, kube, caplog):
    api.routes[("POST", "/api/v1/namespaces/team-a/pods")] = (201, {"metadata": {"name": "p1", "namespace": "team-a"}})
    api.routes[("DELETE", "/api/v1/namespaces/team-a/pods/p1")] = (200, {"metadata": {"name": "p1"}})
    caplog.set_level(logging.DEBUG, logger="dra_harness")
    kube.create(rest.PODS, {"metadata": {"name": "p1"}}, "team-a")
    kube.delete(rest.PODS, "p1", "team-a")
    lines = _lines(caplog)
    assert len(lines) == 2, lines
    assert lines[0].startswith("POST Pod team-a/p1 -> 201 (")
    assert lines[1].startswith("DELETE Pod team-a/p1 -> 200 (")


def test_a_failed_write_logs_its_status_and_reason_and_a_read_logs_only_at_debug(api, kube, caplog):
    api.routes[("PATCH", "/api/v1/nodes/n1")] = (409, {"kind": "Status", "reason": "Conflict", "message": "m", "code": 409})
    api.routes[("GET", "/apis/resource.k8s.io/v1/resourceslices")] = (200, {"metadata": {"resourceVersion": "7"}, "items": []})
    caplog.set_level(logging.DEBUG, logger="dra_harness")
    with pytest.raises(rest.Conflict):
        kube.patch(rest.NODES, "n1", {"spec": {"unschedulable": True}})
    kube.delete(rest.PODS, "gone", "team-a")  # missing_ok: still said, with its 404
    kube.list(rest.RESOURCE_SLICES, field_selector="spec.driver=gpu.example.com")
    assert [line.split(" (")[0] for line in _lines(caplog)] == [
        "PATCH Node n1 -> 409 Conflict", "DELETE Pod team-a/gone -> 404 NotFound"]
    assert [line.split(" (")[0] for line in _lines(caplog, level=logging.DEBUG)] == [
        "GET ResourceSlice * fieldSelector=spec.driver=gpu.example.com -> 200"]


def test_collection_deletes_name_their_selector_and_reviews_are_not_writes(api, kube, caplog):
    api.routes[("DELETE", "/api/v1/namespaces/run-1/pods")] = (200, {"kind": "PodList", "items": []})
    api.routes[("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")] = (201, {"status": {"allowed": True}})
    api.routes[("PUT", "/api/v1/namespaces/run-1/status")] = (200, {"metadata": {"name": "run-1"}})
    caplog.set_level(logging.INFO, logger="dra_harness")
    kube.delete_collection(rest.PODS, "run-1", label_selector="dra-harness.io/run=r1", grace_seconds=0)
    kube.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {"spec": {}})
    kube.replace_status(rest.NAMESPACES, {"metadata": {"name": "run-1"}})
    assert [line.split(" (")[0] for line in _lines(caplog)] == [
        "DELETE Pod run-1/* labelSelector=dra-harness.io/run=r1 -> 200",
        "PUT Namespace/status run-1 -> 200"]


def test_no_body_token_or_secret_value_is_ever_logged(api, kube, token, caplog):
    password = "pw-" + secrets.token_hex(8)
    api_token = "sa-" + secrets.token_hex(8)
    body = {"metadata": {"name": "creds"}, "stringData": {"password": password, "token": api_token}}
    # The server echoes the secret back, as a real one does, and refuses a second create quoting it.
    api.routes[("POST", "/api/v1/namespaces/team-a/secrets")] = [
        (201, {"kind": "Secret", "metadata": {"name": "creds"}, "stringData": body["stringData"]}),
        (422, {"kind": "Status", "reason": "Invalid", "code": 422, "message": f"bad value {password} {api_token}"}),
    ]
    api.routes[("PATCH", "/api/v1/namespaces/team-a/secrets/creds")] = (200, {"data": {"token": api_token}})
    caplog.set_level(logging.DEBUG)  # every logger, the libraries' too
    caplog.set_level(logging.DEBUG, logger="dra_harness")
    kube.create(SECRETS, body, "team-a")
    with pytest.raises(rest.ApiError) as refused:
        kube.create(SECRETS, body, "team-a")
    kube.patch(SECRETS, "creds", {"stringData": {"password": password}}, "team-a")
    # Control: the values did travel, in the request bodies, the header and the error the caller gets.
    sent = b"".join(s[2] for s in api.seen)
    assert password.encode() in sent and api_token.encode() in sent
    assert all(s[3].get("authorization") == f"Bearer {token}" for s in api.seen)
    assert password in str(refused.value)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert [line.split(" (")[0] for line in _lines(caplog)] == [
        "POST Secret team-a/creds -> 201", "POST Secret team-a/creds -> 422 Invalid", "PATCH Secret team-a/creds -> 200"]
    for value in (password, api_token, token, "stringData", "password"):
        assert value not in logged


def test_pytest_live_log_shows_the_harness_writes(api, tmp_path):
    """pytest's own ``--log-cli-level=INFO`` shows them: the plugin adds nothing for it."""
    api.routes[("POST", "/api/v1/namespaces")] = (201, {"metadata": {"name": "ns-live"}})
    test = tmp_path / "test_live.py"
    test.write_text(
        "from kubernetes import client\n"
        "from dra_harness.kube import rest\n"
        "def test_it():\n"
        "    c = client.Configuration()\n"
        f"    c.host = 'http://127.0.0.1:{api.server_address[1]}'\n"
        "    rest.Kube(c).create(rest.NAMESPACES, {'metadata': {'name': 'ns-live'}})\n")
    args = [sys.executable, "-m", "pytest", str(test), "-q", "-p", "no:cacheprovider", "-p", "no:locust",
            f"--rootdir={tmp_path}"]
    live = subprocess.run(args + ["--log-cli-level=INFO"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert live.returncode == 0, live.stdout + live.stderr
    assert "dra_harness.kube" in live.stdout and "POST Namespace ns-live -> 201" in live.stdout
    quiet = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert quiet.returncode == 0 and "POST Namespace" not in quiet.stdout  # control: not without the flag


# -- the command line ------------------------------------------------------------------------------
@pytest.fixture
def harness_logger():
    logger = logging.getLogger("dra_harness")
    level, handlers = logger.level, list(logger.handlers)
    logger.setLevel(logging.NOTSET)
    yield logger
    logger.setLevel(level)
    logger.handlers[:] = handlers


@pytest.mark.parametrize(("flags", "level"), [
    ([], logging.NOTSET), (["-v"], logging.INFO), (["-vv"], logging.DEBUG), (["-vvv"], logging.DEBUG),
    (["--log-level", "info"], logging.INFO), (["--log-level", "DEBUG"], logging.DEBUG),
    (["--log-level", "WARNING", "-v"], logging.INFO), (["--log-level", "warning"], logging.WARNING),
])
def test_log_level_and_verbose_set_the_harness_level(flags, level, harness_logger, tmp_path, monkeypatch):
    monkeypatch.setenv("DRA_HARNESS_STATE", str(tmp_path))
    result = CliRunner().invoke(main, [*flags, "cluster", "status", "--name", "nosuch"])
    assert result.exit_code == 2, result.output
    assert harness_logger.level == level


def test_verbose_cluster_status_of_a_missing_cluster_fails_as_before(harness_logger, tmp_path, monkeypatch):
    monkeypatch.setenv("DRA_HARNESS_STATE", str(tmp_path))
    plain = CliRunner().invoke(main, ["cluster", "status", "--name", "nosuch"])
    verbose = CliRunner().invoke(main, ["-vv", "cluster", "status", "--name", "nosuch"])
    assert plain.exit_code == verbose.exit_code == 2
    assert plain.stderr.strip() == verbose.stderr.strip() == "error: cluster 'nosuch' is not up"
    assert plain.stdout == verbose.stdout == ""


def test_a_bogus_log_level_is_a_one_line_usage_error(harness_logger):
    result = CliRunner().invoke(main, ["--log-level", "BOGUS", "cluster", "status"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: Invalid value for '--log-level': 'BOGUS'"), result.stderr
    assert harness_logger.level == logging.NOTSET  # refused before anything was configured


def test_the_handler_writes_compact_lines_to_the_current_stderr(harness_logger, capsys):
    logs.configure(logging.INFO)
    logs.configure(logging.INFO)  # idempotent: one handler, one line
    logging.getLogger("dra_harness.kube").info("DELETE Pod a/b -> 200 (3 ms)")
    logging.getLogger("dra_harness.kube").debug("not shown")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    clock, name, message = err[0].split(" ", 2)
    assert time.strptime(clock.split(".")[0], "%H:%M:%S") and name == "dra_harness.kube"
    assert message == "DELETE Pod a/b -> 200 (3 ms)"


# -- a retry with tenacity ---------------------------------------------------------------------------
REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def _grant_routes(api, answers: list[bool]) -> None:
    api.routes[("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews")] = (
        201, {"status": {"userInfo": {"username": "tester"}}})
    api.routes[("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings")] = (
        201, {"metadata": {"name": "dra-harness"}})
    api.routes[("POST", REVIEWS)] = [(201, {"status": {"allowed": a}}) for a in answers]


def test_granting_the_namespace_role_retries_until_the_binding_takes_effect(api, kube, caplog):
    _grant_routes(api, [False, False, True])
    caplog.set_level(logging.DEBUG, logger="dra_harness")
    grant_namespace_role(kube, "team-a", timeout=10)
    assert [m for m, p, *_ in api.seen if p == REVIEWS] == ["POST"] * 3
    retried = [r.getMessage() for r in caplog.records if r.name == "dra_harness.providers.handle"]
    assert len(retried) == 2 and "team-a" in retried[0], retried  # one line per retry, at DEBUG
    assert "POST RoleBinding team-a/dra-harness -> 201" in "\n".join(_lines(caplog))


def test_granting_the_namespace_role_gives_up_at_its_deadline_with_the_explanation(api, kube):
    _grant_routes(api, [False])
    started = time.monotonic()
    with pytest.raises(rest.ApiError) as refused:
        grant_namespace_role(kube, "team-a", timeout=1.0)
    took = time.monotonic() - started
    assert 1.0 <= took < 5.0
    assert refused.value.status == 403
    assert "tester may not create pods in its own namespace team-a: bind the roles" in str(refused.value)
    assert len([p for _, p, *_ in api.seen if p == REVIEWS]) >= 3  # it did retry before giving up


def test_a_start_up_poll_retries_until_its_deadline_and_names_the_last_answer(tmp_path, monkeypatch, caplog):
    from dra_harness.providers.embedded.cluster import ClusterError, LocalCluster

    monkeypatch.setenv("DRA_HARNESS_STATE", str(tmp_path))
    cluster = LocalCluster("poll")
    answers = iter([rest.Unreachable("API server unreachable: NewConnectionError"), "not ok", None])

    def probe() -> str | None:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    caplog.set_level(logging.DEBUG, logger="dra_harness")
    cluster.readiness.poll("kube-apiserver", time.monotonic() + 10, probe)  # a transient failure, a no, then a yes
    retries = [r.getMessage() for r in caplog.records if r.name == "dra_harness.providers.embedded.readiness"]
    assert retries == ["kube-apiserver: attempt 1: API server unreachable: NewConnectionError; again in 0.1s",
                       "kube-apiserver: attempt 2: not ok; again in 0.1s"]
    started = time.monotonic()
    with pytest.raises(ClusterError, match=r"^timed out waiting for nodes Ready: not Ready: gpu-node-1$"):
        cluster.readiness.poll("nodes Ready", time.monotonic() + 0.5, lambda: "not Ready: gpu-node-1")
    assert 0.5 <= time.monotonic() - started < 3


def test_a_process_that_exits_during_start_up_ends_the_poll_at_once(tmp_path, monkeypatch):
    """Negative control for the retry: only "not yet" is retried, a dead process is not."""
    from dra_harness.providers.embedded.cluster import ClusterError, LocalCluster

    monkeypatch.setenv("DRA_HARNESS_STATE", str(tmp_path))
    cluster = LocalCluster("poll")
    cluster.state_dir.mkdir(parents=True)
    cluster.supervisor.start("etcd", [sys.executable, "-c", "print('etcd: bad flag'); raise SystemExit(1)"])
    deadline = time.monotonic() + 30  # a loaded machine starts Python slowly: "at once" counts from its exit
    while cluster.supervisor.exited("etcd") is None and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    with pytest.raises(ClusterError, match=r"^etcd exited during start-up; last log lines:\netcd: bad flag"):
        cluster.readiness.poll("kube-apiserver", time.monotonic() + 30, lambda: "not ok")
    assert time.monotonic() - started < 5
    cluster.down()


@pytest.mark.parametrize(("flags", "passed"), [(["-v"], ["--log-cli-level=INFO"]), (["-vv"], ["--log-cli-level=DEBUG"]), ([], [])])
def test_run_passes_the_level_to_pytests_live_log(flags, passed, harness_logger, tmp_path, monkeypatch):
    from dra_harness.cli import runner

    seen: list[list[str]] = []
    monkeypatch.setattr(runner, "_pytest", lambda args, cwd: seen.append(args) or 0)
    monkeypatch.setattr(runner, "_fingerprint", lambda provider, console, run_id: {})
    monkeypatch.setattr(runner.inputs, "check", lambda *args: None)  # no cluster to check here
    result = CliRunner().invoke(main, [*flags, "run", "--cluster", "existing", "--report-dir", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    assert [a for a in seen[0] if a.startswith("--log-cli-level")] == passed
