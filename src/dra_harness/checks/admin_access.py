"""``adminAccess`` claims: refused in a namespace without the admin-access label, accepted with it.

Under DRAAdminAccess the API server lets a claim ask for ``adminAccess: true`` (every device of
the class, even in use, for monitoring or maintenance) only in a namespace labelled
``resource.kubernetes.io/admin-access=true``. A cluster where that label is set everywhere, or
an API server that does not enforce it, hands any tenant access to devices others hold. The
probe asks twice, as a server-side dry run (nothing is created): before and after labelling
the namespace; :meth:`AdminAccess.problems` says what is wrong, and is what the suite and its
negative control both assert on.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_harness.kube import builders, rest
from dra_harness.kube.rest import Kube

LABEL = "resource.kubernetes.io/admin-access"


@dataclass(frozen=True)
class AdminAccess:
    #: The API server's refusal, or None when the claim was accepted.
    without_label: str | None
    with_label: str | None

    def problems(self) -> list[str]:
        out = []
        if self.without_label is None:
            out.append(f"an adminAccess claim was accepted before the probe labelled the namespace {LABEL}=true")
        elif LABEL not in self.without_label:
            out.append(f"refused without the label, but not for it: {self.without_label}")
        if self.with_label is not None:
            out.append(f"refused even with {LABEL}=true: {self.with_label}")
        return out


def ask(kube: Kube, namespace: str, device_class: str, run_id: str) -> str | None:
    """The refusal of an adminAccess claim in ``namespace`` (dry run), or None when it would be created."""
    body = builders.claim("admin", run_id, [builders.exactly("gpu", device_class, admin_access=True)])
    try:
        kube.create(rest.RESOURCE_CLAIMS, body, namespace, dry_run=True)
    except rest.ApiError as e:
        return f"{e.status} {e.message}"
    return None


def probe(kube: Kube, namespace: str, device_class: str, run_id: str) -> AdminAccess:
    """Ask as the namespace is, label it, ask again. Raises :class:`rest.ApiError` when labelling is forbidden."""
    without = ask(kube, namespace, device_class, run_id)
    kube.patch(rest.NAMESPACES, namespace, {"metadata": {"labels": {LABEL: "true"}}})
    return AdminAccess(without, ask(kube, namespace, device_class, run_id))
