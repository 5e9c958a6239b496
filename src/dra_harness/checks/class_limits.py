"""Per-namespace DeviceClass limits: the shipped ValidatingAdmissionPolicy, installed for one run.

``deploy/policies/device-class-limits.yaml`` is what a platform team applies: namespaces labelled
:data:`LIMIT_LABEL` ``=enforced`` may claim only the classes their :data:`ALLOWED_ANNOTATION`
names. To check it without touching anyone else's namespaces, the harness installs the file's
policy and binding under names of its own and narrows the policy to namespaces carrying its run
label; the CEL, the rule and the message are the file's. An admission policy takes effect a
moment after it is created (the API server loads it through an informer), so
:meth:`ClassLimits.first_refusal` asks with server-side dry runs until the policy refuses, up to
a deadline: a policy that never refuses in that time is what the check reports.
"""

from __future__ import annotations

import time
import uuid

from dra_harness import data, yamlfile
from dra_harness.errors import InputError
from dra_harness.kube import builders, rest
from dra_harness.kube.rest import Kube
from dra_harness.labels import RUN_LABEL

POLICY_FILE = data.path("policies", "device-class-limits.yaml")
LIMIT_LABEL = "platform.dra-harness.io/device-class-limits"
ALLOWED_ANNOTATION = "platform.dra-harness.io/allowed-device-classes"


class ClassLimits:
    """The policy (and binding) of :data:`POLICY_FILE`, installed under a fresh name for ``run_id``."""

    def __init__(self, kube: Kube, run_id: str) -> None:
        self.kube, self.run_id = kube, run_id
        self.name = f"device-class-limits-{run_id[:8]}-{uuid.uuid4().hex[:4]}"
        #: What install() created, binding last: remove() deletes exactly these (a refused binding leaves the policy).
        self.created: list[rest.Resource] = []

    def install(self) -> None:
        docs = {d["kind"]: d for d in yamlfile.load_all(POLICY_FILE, InputError, f"policy {POLICY_FILE}")}
        policy, binding = docs["ValidatingAdmissionPolicy"], docs["ValidatingAdmissionPolicyBinding"]
        labels = {RUN_LABEL: self.run_id}
        policy["metadata"] = {"name": self.name, "labels": labels}
        policy["spec"]["matchConstraints"]["namespaceSelector"]["matchLabels"][RUN_LABEL] = self.run_id
        self.kube.create(rest.VALIDATING_ADMISSION_POLICIES, policy)
        self.created.append(rest.VALIDATING_ADMISSION_POLICIES)
        binding["metadata"] = {"name": self.name, "labels": labels}
        binding["spec"]["policyName"] = self.name
        self.kube.create(rest.VALIDATING_ADMISSION_POLICY_BINDINGS, binding)
        self.created.append(rest.VALIDATING_ADMISSION_POLICY_BINDINGS)

    def limit(self, namespace: str, classes: list[str], label: bool = True) -> None:
        """Put ``namespace`` under the policy, allowed only ``classes``. ``label=False`` writes the allowed
        classes but not the label that selects the namespace (the negative control: a namespace the policy
        does not select is not limited, whatever its annotation says)."""
        self.kube.patch(rest.NAMESPACES, namespace, {"metadata": {
            "labels": {LIMIT_LABEL: "enforced"} if label else {},
            "annotations": {ALLOWED_ANNOTATION: ", ".join(classes)}}})

    def first_refusal(self, namespace: str, device_class: str, timeout: float = 15.0) -> str | None:
        """The policy's refusal of a claim for ``device_class`` in ``namespace`` (dry run, nothing stored),
        asked every 0.5 s until it comes or ``timeout`` passes (then None: the class was let in throughout)."""
        body = builders.claim("probe", self.run_id, [builders.exactly("gpu", device_class)])
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.kube.create(rest.RESOURCE_CLAIMS, body, namespace, dry_run=True)
            except rest.ApiError as e:
                if self.name in e.message:
                    return e.message
                raise
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.5)

    def remove(self) -> None:
        while self.created:
            self.kube.delete(self.created.pop(), self.name)
