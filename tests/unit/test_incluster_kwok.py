"""The in-cluster KWOK's role: deploy/rbac ships the same rules the harness gives a role of its own."""

from __future__ import annotations

import yaml

from dra_harness import data
from dra_harness.providers.incluster_kwok import RULES, SHIPPED_ROLE


def _docs() -> list[dict]:
    return [d for d in yaml.safe_load_all(data.path("rbac", "dra-harness.yaml").read_text()) if d]


def test_the_shipped_kwok_role_grants_exactly_what_a_role_of_the_runs_own_would():
    shipped = next(d for d in _docs() if d["kind"] == "ClusterRole" and d["metadata"]["name"] == SHIPPED_ROLE)
    assert shipped["rules"] == RULES


def test_the_contention_role_may_bind_the_kwok_role_and_no_other():
    contention = next(d for d in _docs() if d["metadata"]["name"] == "dra-harness-contention")
    binds = [r for r in contention["rules"] if "bind" in r["verbs"]]
    assert binds == [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"],
                      "resourceNames": [SHIPPED_ROLE]}]
    # No role of the file may escalate, or write roles themselves (only bindings, narrowed by the policy).
    for doc in _docs():
        for rule in doc.get("rules") or []:
            assert "escalate" not in rule["verbs"], doc["metadata"]["name"]
            assert not ({"clusterroles", "roles"} & set(rule.get("resources", [])) and
                        set(rule["verbs"]) - {"bind", "get", "list", "watch"}), doc["metadata"]["name"]
