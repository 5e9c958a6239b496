"""``canary stop`` deletes only the namespace of the canary its record names: labelled with that run, that very uid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dra_harness.cli.app import main
from dra_harness.kube import rest
from dra_harness.labels import RUN_LABEL
from dra_harness.upgrade import canary

RUN_ID = "0123456789ab"
OURS = {RUN_LABEL: RUN_ID, canary.CANARY_LABEL: "true"}


class Namespaces:
    """Just the namespace reads and deletes of a Kube, with DeleteOptions' uid precondition."""

    def __init__(self, **labels: dict[str, str]) -> None:
        self.items = {name: {"metadata": {"name": name, "uid": f"uid-{name}", "labels": lab}} for name, lab in labels.items()}
        self.deleted: list[str] = []
        self.replace_before_delete = False

    def get(self, res: rest.Resource, name: str, namespace: str | None = None) -> dict:
        assert res is rest.NAMESPACES
        if name not in self.items:
            raise rest.NotFound(404, "NotFound", f"namespaces {name} not found")
        return self.items[name]

    def request(self, method: str, path: str, body: dict | None = None, **kwargs) -> dict:
        name = path.rsplit("/", 1)[1]
        assert method == "DELETE" and path == rest.NAMESPACES.path(None, name)
        if self.replace_before_delete:
            self.items[name]["metadata"]["uid"] = "uid-recreated"
        if name not in self.items:
            raise rest.NotFound(404, "NotFound", f"namespaces {name} not found")
        if (body or {}).get("preconditions", {}).get("uid") not in (None, self.items[name]["metadata"]["uid"]):
            raise rest.Conflict(409, "Conflict", "Precondition failed: UID in precondition")
        self.deleted.append(name)
        return self.items.pop(name)


def _record(run_dir: Path, namespace: str, kube: Namespaces, monkeypatch) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / canary.STATE).write_text(json.dumps({"run_id": RUN_ID, "namespace": namespace, "kubeconfig": "kc",
                                                    "context": None, "snapshot": None}))
    monkeypatch.setattr(canary, "connect", lambda kubeconfig, context: kube)
    monkeypatch.setattr(canary, "wait_for_deletion", lambda *a, **k: None)
    return run_dir


def test_stop_deletes_the_canarys_own_labelled_namespace_and_its_record(tmp_path, monkeypatch):
    # Control: the check lets the canary's own namespace go.
    kube = Namespaces(**{f"dra-canary-{RUN_ID}": OURS})
    run = _record(tmp_path, f"dra-canary-{RUN_ID}", kube, monkeypatch)
    assert canary.stop(run) == f"dra-canary-{RUN_ID}"
    assert kube.deleted == [f"dra-canary-{RUN_ID}"] and not (run / canary.STATE).exists()


@pytest.mark.parametrize("namespace, labels, says", [
    ("kube-system", {}, f"it has {RUN_LABEL}=(none), {canary.CANARY_LABEL}=(none)"),
    ("dra-canary-other", {RUN_LABEL: "fedcba987654", canary.CANARY_LABEL: "true"}, f"{RUN_LABEL}=fedcba987654"),
    ("team-a", {RUN_LABEL: RUN_ID}, f"{canary.CANARY_LABEL}=(none)"),  # a run's label alone does not make it a canary
])
def test_stop_refuses_a_namespace_the_record_names_without_its_labels(tmp_path, monkeypatch, namespace, labels, says):
    # Negative control: the old stop deleted whatever namespace the record named, kube-system included.
    kube = Namespaces(**{namespace: labels})
    run = _record(tmp_path, namespace, kube, monkeypatch)
    with pytest.raises(canary.CanaryRefused, match=f"^namespace {namespace} is not canary {RUN_ID}'s .*refusing") as e:
        canary.stop(run)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert kube.deleted == [] and namespace in kube.items and (run / canary.STATE).exists()


def test_stop_refuses_a_namespace_replaced_between_the_check_and_the_delete(tmp_path, monkeypatch):
    kube = Namespaces(**{f"dra-canary-{RUN_ID}": OURS})
    kube.replace_before_delete = True
    run = _record(tmp_path, f"dra-canary-{RUN_ID}", kube, monkeypatch)
    with pytest.raises(canary.CanaryRefused, match="was replaced while being checked"):
        canary.stop(run)
    assert kube.deleted == [] and (run / canary.STATE).exists()


def test_stop_of_a_namespace_already_gone_removes_the_record(tmp_path, monkeypatch):
    run = _record(tmp_path, f"dra-canary-{RUN_ID}", Namespaces(), monkeypatch)
    canary.stop(run)
    assert not (run / canary.STATE).exists()


def test_the_stop_command_refuses_in_one_line_with_exit_2(tmp_path, monkeypatch):
    run = _record(tmp_path, "kube-system", Namespaces(**{"kube-system": {}}), monkeypatch)
    out = CliRunner().invoke(main, ["canary", "stop", str(run)])
    assert out.exit_code == 2 and "Traceback" not in out.output, out.output
    assert len(out.output.strip().splitlines()) == 1 and "refusing to delete it" in " ".join(out.output.split())
    (run / canary.STATE).write_text(json.dumps({"run_id": 7, "namespace": "kube-system"}))
    bad = CliRunner().invoke(main, ["canary", "stop", str(run)])
    assert bad.exit_code == 2 and "not a canary record" in " ".join(bad.output.split()), bad.output
