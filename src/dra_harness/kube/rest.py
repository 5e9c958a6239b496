"""A small Kubernetes REST core: plain dicts in and out, typed errors, real watches.

Why not the generated client's models: DRA's API grows every minor, and the
generated models (pydantic since client 37) lag behind the server or reject fields
they do not know. The harness reads and writes objects as the API server serves them,
so a field added in 1.38 is visible in evidence without a client upgrade. The
``kubernetes`` package still loads kubeconfigs (exec plugins, tokens, contexts):
:func:`dra_harness.kube.client.connect`.

Every call is logged on the ``dra_harness.kube`` logger, after its answer: writes
(POST, PUT, PATCH, DELETE) at INFO, reads and watches at DEBUG, as one line with the
verb, the kind, namespace/name (or the selector of a collection) and the status,
e.g. ``DELETE Pod ns/name -> 200 (12 ms)``. Bodies, headers and the API server's
error messages are never logged: they may hold tokens or Secret data.
"""

from __future__ import annotations

import builtins
import copy
import datetime as dt
import email.utils
import http.client
import json
import logging
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client

from dra_harness.errors import KubeApiError
from dra_harness.kube.rules import ClusterRules
from dra_harness.kube.types import Obj

log = logging.getLogger("dra_harness.kube")
T = TypeVar("T")


class ApiError(KubeApiError):
    """The API server answered with an error status."""

    def __init__(self, status: int, reason: str, message: str, body: Obj | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}
        #: Sent twice (the connection closed before the first answer): the first may have been applied.
        self.resent = False


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class Gone(ApiError):
    """The resourceVersion a watch started from is too old (410)."""


class Unreachable(KubeApiError):
    """No answer from the API server at all."""


def transient(error: BaseException) -> bool:
    """An answer that may be different in a moment: too many requests, a server error, no answer at all. Clean-up
    that meets one leaves the object to a later pass (the end-of-run sweep retries), never fails a verdict on it."""
    return isinstance(error, Unreachable) or (isinstance(error, ApiError) and (error.status == 429 or error.status >= 500))


def answered(call: Callable[[], T], within_s: float, every_s: float = 1.0) -> T:
    """``call()``, asked again while the API server does not answer or turns it away for a moment (:func:`transient`)
    for up to ``within_s`` (a control-plane restart, a storm of 429s); then its last error."""
    end = time.monotonic() + within_s
    while True:
        try:
            return call()
        except (ApiError, Unreachable) as e:
            if not transient(e) or time.monotonic() + every_s > end:
                raise
            log.info("%s; again in %.1fs", str(e).splitlines()[0] if str(e) else type(e).__name__, every_s)
        time.sleep(every_s)


_ERRORS = {404: NotFound, 409: Conflict, 410: Gone}
#: How long a request turned away as busy (429 before processing) is retried before its error is raised.
BUSY_RETRY_S = 30.0
#: How long after this client last found the API server unreachable a 401/403 is taken for a server still starting.
RESTART_GRACE_S = 30.0

#: (group, plural) -> kind of every :class:`Resource` made, so a logged path names its kind.
_KINDS: dict[tuple[str, str], str] = {}
#: Groups whose POSTs ask a question (access and identity reviews) and store nothing: logged as reads.
_REVIEW_GROUPS = ("authentication.k8s.io", "authorization.k8s.io")


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    def __post_init__(self) -> None:
        _KINDS.setdefault((self.group, self.plural), self.kind)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if sub:
            base += f"/{sub}"
        return base


NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
NODES = Resource("", "v1", "nodes", "Node", False)
PODS = Resource("", "v1", "pods", "Pod", True)
EVENTS = Resource("", "v1", "events", "Event", True)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", True)
RESOURCE_QUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota", True)
LIMIT_RANGES = Resource("", "v1", "limitranges", "LimitRange", True)
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
SECRETS = Resource("", "v1", "secrets", "Secret", True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet", True)
DAEMON_SETS = Resource("apps", "v1", "daemonsets", "DaemonSet", True)
JOBS = Resource("batch", "v1", "jobs", "Job", True)
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True)
DEVICE_CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False)
RESOURCE_SLICES = Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False)
RESOURCE_CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True)
RESOURCE_CLAIM_TEMPLATES = Resource(
    "resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True
)
VALIDATING_ADMISSION_POLICIES = Resource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies",
                                         "ValidatingAdmissionPolicy", False)
VALIDATING_ADMISSION_POLICY_BINDINGS = Resource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
                                                "ValidatingAdmissionPolicyBinding", False)
VALIDATING_WEBHOOK_CONFIGURATIONS = Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                                             "ValidatingWebhookConfiguration", False)
RUNTIME_CLASSES = Resource("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False)
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False)


class Kube:
    """Verbs over any :class:`Resource`, using one kubeconfig's connection settings."""

    def __init__(self, configuration: client.Configuration) -> None:
        self.configuration = configuration
        self.host = configuration.host.rstrip("/")
        self._unreachable_at = -RESTART_GRACE_S  # never, as far as this client knows
        ctx = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        if not configuration.verify_ssl:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if configuration.cert_file:
            ctx.load_cert_chain(configuration.cert_file, configuration.key_file)
        self._pool = urllib3.PoolManager(maxsize=32, ssl_context=ctx)
        self._impersonate: dict[str, str] = {}
        #: The drivers whose devices the run tests (the profile's): a pod wait judges a scheduling refusal against the
        #: nodes that publish them (:mod:`.refusals`); empty: any driver's.
        self.device_drivers: frozenset[str] = frozenset()
        #: Nodes cordoned before the run began, by no run of the harness: maintenance, which a wait does not outwait.
        self.cordoned_before: frozenset[str] = frozenset()
        #: The cluster's rules (tolerations, node selector, labels...), applied to every body this client creates.
        self.rules = ClusterRules()

    def impersonating(self, user: str, extra: dict[str, str] | None = None) -> Kube:
        """This client acting as ``user`` (the identity needs the ``impersonate`` verb), to try what another
        identity may do for real: a driver's ServiceAccount, say, with the node its pod runs on as ``extra``.
        The API server adds a ServiceAccount's groups itself."""
        other = copy.copy(self)
        # Extra keys travel in header names, where "/" is not allowed: percent-encoded, as the API server expects.
        other._impersonate = {"Impersonate-User": user,
                              **{f"Impersonate-Extra-{quote(k, safe='')}": v for k, v in (extra or {}).items()}}
        return other

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "dra-harness", **self._impersonate}
        if content_type:
            headers["Content-Type"] = content_type
        # auth_settings() re-runs token refresh hooks (exec plugins) when needed.
        # The client's AuthSettings TypedDict names only BearerToken; its values are all APIKeyAuthSetting dicts.
        for setting in cast(dict[str, dict[str, Any]], self.configuration.auth_settings()).values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, Any] | None = None,
        content_type: str | None = "application/json",
        timeout: float = 30.0,
    ) -> Obj:
        url = self.host + path
        query = {k: v for k, v in (params or {}).items() if v is not None}
        if query:
            url += "?" + urlencode(query)
        retry_until = time.monotonic() + BUSY_RETRY_S
        while True:
            try:
                return self._request_once(method, url, path, params, body, content_type, timeout)
            except ApiError as e:
                wait = _busy_wait(e, method)
                if wait is None and e.status in (401, 403) and self._restarting():
                    wait = 0.5  # a server just (re)started refuses until its authorizer's caches fill: not an answer yet
                if wait is None or time.monotonic() + wait > retry_until:
                    raise
                time.sleep(wait)

    def _restarting(self) -> bool:
        """Whether the API server may still be starting: this client found it unreachable less than
        :data:`RESTART_GRACE_S` ago, or its ``/readyz`` says it is not ready (a 500 naming the checks that fail; a
        4xx there says nothing: a server just started may refuse that path too, and some clusters lock it)."""
        if time.monotonic() - self._unreachable_at < RESTART_GRACE_S:
            return True
        try:
            self.raw("/readyz", timeout=2.0)
        except ApiError as e:
            return e.status >= 500
        except Unreachable:
            return True
        return False

    def _request_once(
        self, method: str, url: str, path: str, params: dict[str, Any] | None, body: Any,
        content_type: str | None, timeout: float,
    ) -> Obj:
        started = time.monotonic()
        try:
            for attempt in (1, 2):
                try:
                    resp = self._pool.request(
                        method,
                        url,
                        body=json.dumps(body) if body is not None else None,
                        headers=self._headers(content_type if body is not None else None),
                        timeout=urllib3.Timeout(connect=5.0, read=timeout),
                        retries=False,
                    )
                    break
                except urllib3.exceptions.ProtocolError as e:
                    # A kept-alive connection the server closed while idle ends before any answer, so the request
                    # was never read: sending it once more on a new connection is safe, even a POST.
                    if attempt == 2 or not _closed_before_answer(e):
                        raise
        except urllib3.exceptions.HTTPError as e:
            _log_call(method, path, params, body, None, f"unreachable ({e.__class__.__name__})", started)
            self._unreachable_at = time.monotonic()
            raise Unreachable(f"API server {self.host} unreachable: {e.__class__.__name__}") from e
        data = resp.data.decode(errors="replace")
        if resp.status >= 400:
            error = _error(resp.status, data)
            error.resent = attempt == 2  # the first send may have been applied (its answer lost): the caller reads back
            _log_call(method, path, params, body, None, f"{resp.status} {error.reason}".rstrip(), started)
            raise error
        answer = json.loads(data) if data.startswith(("{", "[")) else {"raw": data}
        _log_call(method, path, params, body, answer, str(resp.status), started)
        return answer

    def raw(self, path: str, timeout: float = 10.0) -> str:
        """GET a non-resource path (``/readyz``, ``/metrics``) and return the text."""
        try:
            resp = self._pool.request(
                "GET", self.host + path, headers=self._headers(None),
                timeout=urllib3.Timeout(connect=5.0, read=timeout), retries=False,
            )
        except urllib3.exceptions.HTTPError as e:
            log.debug("GET %s -> unreachable (%s)", path.split("?")[0], e.__class__.__name__)
            raise Unreachable(f"API server {self.host} unreachable: {e.__class__.__name__}") from e
        log.debug("GET %s -> %s", path.split("?")[0], resp.status)
        text = resp.data.decode(errors="replace")
        if resp.status >= 400:
            raise _error(resp.status, text)
        return text

    def server_date(self) -> dt.datetime:
        """The API server's clock now (its ``Date`` header, to the second): what a Lease's server-stamped times are
        compared with, never this machine's clock."""
        try:
            resp = self._pool.request("GET", self.host + "/version", headers=self._headers(None),
                                      timeout=urllib3.Timeout(connect=5.0, read=10.0), retries=False)
        except urllib3.exceptions.HTTPError as e:
            raise Unreachable(f"API server {self.host} unreachable: {e.__class__.__name__}") from e
        if resp.status >= 400:
            raise _error(resp.status, resp.data.decode(errors="replace"))
        try:
            return email.utils.parsedate_to_datetime(resp.headers["Date"]).astimezone(dt.UTC)
        except (KeyError, TypeError, ValueError) as e:
            raise ApiError(resp.status, "NoDate", "the API server's answer has no usable Date header") from e

    # -- verbs ---------------------------------------------------------------
    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        return self.request("GET", res.path(namespace, name))

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        return self.list_with_version(res, namespace, label_selector, field_selector)[0]

    def list_with_version(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[builtins.list[Obj], str]:  # builtins: in this class, `list` is Kube.list
        out = self.request(
            "GET",
            res.path(namespace),
            params={"labelSelector": label_selector, "fieldSelector": field_selector},
        )
        return out.get("items") or [], out["metadata"].get("resourceVersion", "")

    def create(self, res: Resource, body: Obj, namespace: str | None = None, dry_run: bool = False) -> Obj:
        """Create ``body``; ``dry_run``: admitted and validated by the API server, stored nowhere."""
        body = {"apiVersion": res.api_version, "kind": res.kind, **body}
        if dry_run:  # a dry run checks a manifest as it is (lint of the user's own): never shaped
            return self.request("POST", res.path(namespace or body.get("metadata", {}).get("namespace")), body,
                                params={"dryRun": "All"})
        body = self.rules.shape(res.kind, body)
        where = namespace or body.get("metadata", {}).get("namespace")
        try:
            return self.request("POST", res.path(where), body)
        except Conflict as e:
            # Sent again after the connection closed without an answer: the first send may have created it. Ours if
            # it carries every label we sent (the run's id among them); anyone else's stays a conflict.
            name = body.get("metadata", {}).get("name")
            if not e.resent or not name:
                raise
            found = self.get(res, name, where)
            labels = found["metadata"].get("labels") or {}
            sent = body["metadata"].get("labels") or {}
            if sent and all(labels.get(k) == v for k, v in sent.items()):
                log.info("%s %s: created by the send whose answer was lost", res.kind, name)
                return found
            raise

    def replace_status(self, res: Resource, body: Obj) -> Obj:
        meta = body["metadata"]
        return self.request("PUT", res.path(meta.get("namespace"), meta["name"], "status"), body)

    def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        kind: str = "merge",
        sub: str | None = None,
        timeout: float = 30.0,
        field_manager: str | None = None,
    ) -> Obj:
        """Patch ``name``; ``kind="json"`` takes a JSON patch (a list of ops, ``test`` ops included: one that
        fails is a 422 and nothing is changed). ``field_manager`` names the writer in the object's managedFields."""
        content = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[kind]
        return self.request("PATCH", res.path(namespace, name, sub), patch, content_type=content, timeout=timeout,
                            params={"fieldManager": field_manager} if field_manager else None)

    def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        grace_seconds: int | None = None,
        propagation: str = "Background",
        missing_ok: bool = True,
    ) -> Obj | None:
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        try:
            return self.request("DELETE", res.path(namespace, name), body)
        except NotFound:
            if missing_ok:
                return None
            raise

    def delete_collection(
        self, res: Resource, namespace: str | None = None, label_selector: str | None = None,
        grace_seconds: int | None = None,
    ) -> None:
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        self.request("DELETE", res.path(namespace), body, params={"labelSelector": label_selector})

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        resource_version: str = "",
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 60,
    ) -> Iterator[tuple[str, Obj]]:
        """Yield ``(type, object)`` events, BOOKMARKs included, until the server ends the stream.

        Raises :class:`Gone` when ``resource_version`` is too old; callers re-list.
        """
        params = {
            "watch": "true",
            "resourceVersion": resource_version or None,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
        }
        url = self.host + res.path(namespace) + "?" + urlencode({k: v for k, v in params.items() if v})
        log.debug("WATCH %s %s from version %s", res.kind,
                  _where(namespace, None, label_selector, field_selector), resource_version or "now")
        try:
            resp = self._pool.request(
                "GET", url, headers=self._headers(None), preload_content=False,
                timeout=urllib3.Timeout(connect=5.0, read=timeout_seconds + 10), retries=False,
            )
        except urllib3.exceptions.HTTPError as e:
            raise Unreachable(f"API server {self.host} unreachable: {e.__class__.__name__}") from e
        try:
            if resp.status >= 400:
                raise _error(resp.status, resp.read().decode(errors="replace"))
            buf = b""
            for chunk in resp.stream(65536):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        status = event["object"]
                        raise _error(status.get("code", 500), json.dumps(status))
                    yield event["type"], event["object"]
        except urllib3.exceptions.ProtocolError:
            return  # the server closed the stream; the caller re-watches
        finally:
            resp.release_conn()


def served(kube: Kube, group: str, plural: str, kind: str, versions: tuple[str, ...],
           namespaced: bool = False) -> Resource | None:
    """The first of ``versions`` in which the server serves ``group``/``plural``, or None.

    Only an answer says "not served" (404, 410, or 403: not allowed to discover, so the run could not have created
    any). A question that got none (a 5xx, no connection) raises :class:`ApiError`/:class:`Unreachable`: unknown is
    never "not served". A control plane restarting behind a load balancer answers 503 for seconds; taken for "not
    served" there, a sweep left the run's DeviceTaintRules (a NoExecute one evicts others' pods) and said clean."""
    for version in versions:
        try:
            listing = kube.request("GET", f"/apis/{group}/{version}")
        except (NotFound, Gone):
            continue
        except ApiError as e:
            if e.status == 403:  # not allowed to discover: nor to create (the roles grant create with list)
                continue
            raise
        if any(r.get("name") == plural for r in listing.get("resources", [])):
            return Resource(group, version, plural, kind, namespaced)
    return None


def device_taint_rules(kube: Kube) -> Resource | None:
    """DeviceTaintRule of the newest version the server serves, or None where none is."""
    return served(kube, "resource.k8s.io", "devicetaintrules", "DeviceTaintRule", ("v1", "v1beta2", "v1alpha3"))


def _where(namespace: str | None, name: str | None, label_selector: str | None = None,
           field_selector: str | None = None) -> str:
    """``ns/name``, ``name``, or for a collection ``ns/*`` with its selectors."""
    where = f"{namespace}/{name or '*'}" if namespace else (name or "*")
    selectors = [s for s in (label_selector and f"labelSelector={label_selector}",
                             field_selector and f"fieldSelector={field_selector}") if s]
    return " ".join([where, *selectors]) if name is None else where


def _log_call(method: str, path: str, params: dict[str, Any] | None, body: Any, answer: Any, outcome: str,
              started: float) -> None:
    """One line per call: writes at INFO, reads at DEBUG; never a body (only names read from it)."""
    parts = path.split("?")[0].strip("/").split("/")
    group, tail = ("", parts[2:]) if parts[0] == "api" else (parts[1] if len(parts) > 1 else "", parts[3:])
    level = logging.INFO if method != "GET" and group not in _REVIEW_GROUPS else logging.DEBUG
    if not log.isEnabledFor(level):
        return
    namespace = None
    # namespaces/<ns>/<plural>[/<name>[/<sub>]], but namespaces/<name>/status is the namespace's own
    if len(tail) >= 3 and tail[0] == "namespaces" and not (len(tail) == 3 and tail[2] in ("status", "finalize")):
        namespace, tail = tail[1], tail[2:]
    plural = tail[0] if tail else ""
    name = tail[1] if len(tail) > 1 else None
    sub = tail[2] if len(tail) > 2 else None
    kind = _KINDS.get((group, plural), plural or path)
    if sub:
        kind += f"/{sub}"
    if name is None and method == "POST":  # a create names its object in the body, or the server does
        for source in (answer, body):
            meta = source.get("metadata") if isinstance(source, dict) else None
            if isinstance(meta, dict) and (meta.get("name") or meta.get("generateName")):
                name = meta.get("name") or meta["generateName"] + "*"
                break
        else:
            name = ""
    params = params or {}
    where = _where(namespace, name, params.get("labelSelector"), params.get("fieldSelector"))
    log.log(level, "%s %s %s -> %s (%.0f ms)", method, kind, where, outcome, (time.monotonic() - started) * 1000)


def _closed_before_answer(error: BaseException) -> bool:
    """Whether the server closed the connection without answering (an idle keep-alive connection it dropped)."""
    return any(isinstance(a, http.client.RemoteDisconnected) for a in error.args)


def _busy_wait(error: ApiError, method: str) -> float | None:
    """Seconds to wait before retrying a request the API server turned away as busy, or None when it must not
    be retried. Only a 429 that rejected the request before it was processed qualifies: any read, and a write
    refused because the kind's storage is (re)initializing (a CRD just installed); an eviction's 429 is a
    PodDisruptionBudget's answer, not a busy server, and goes back to the caller."""
    if error.status != 429 or not (method == "GET" or "storage is (re)initializing" in error.message):
        return None
    retry_after = (error.body.get("details") or {}).get("retryAfterSeconds", 1)
    return min(float(retry_after), 2.0)


def _error(status: int, text: str) -> ApiError:
    try:
        body = json.loads(text)
        message, reason = body.get("message", text), body.get("reason", "")
    except ValueError:
        body, message, reason = None, text.strip()[:500], ""
    return _ERRORS.get(status, ApiError)(status, reason, message, body)
