"""The cluster's rules on plain bodies: what each rule touches, what it leaves, and bad input in one line."""

from __future__ import annotations

import pytest

from dra_harness.errors import InputError
from dra_harness.kube import builders, rules
from dra_harness.kube.rules import ClusterRules, build, parse_toleration
from dra_harness.labels import RUN_LABEL
from dra_harness.options import RunConfig, cluster_rules

MANAGED = build({"toleration": ["nvidia.com/gpu:NoSchedule"], "node_selector": ["pool=gpu"],
                 "namespace_label": ["team=ml"], "pod_label": ["cost=42"], "pod_annotation": ["owner=platform team"],
                 "runtime_class": "nvidia", "image_pull_secret": ["infra/mirror"], "priority_class": "batch",
                 "pause_image": "mirror.example/pause:3.10"})


def gpu_pod(**kw) -> dict:
    return builders.pod("p", "run1", claims={"gpu": {"template": "t"}}, **kw)


def test_kubectl_toleration_syntax_reads_as_the_api_takes_it():
    assert parse_toleration("nvidia.com/gpu:NoSchedule") == {"key": "nvidia.com/gpu", "operator": "Exists",
                                                              "effect": "NoSchedule"}
    assert parse_toleration("dedicated=gpu:NoExecute") == {"key": "dedicated", "operator": "Equal", "value": "gpu",
                                                            "effect": "NoExecute"}
    assert parse_toleration("nvidia.com/gpu") == {"key": "nvidia.com/gpu", "operator": "Exists"}
    assert parse_toleration("*") == {"operator": "Exists"}


@pytest.mark.parametrize("bad", ["gpu:NoSchedul", "bad key!:NoSchedule", "*=x:NoSchedule", "k=v v:NoSchedule"])
def test_a_bad_toleration_is_one_line_naming_the_option_and_never_its_value(bad):
    with pytest.raises(InputError) as e:
        parse_toleration(bad)
    assert str(e.value).startswith("--toleration: ") and bad not in str(e.value) and "\n" not in str(e.value)


def test_a_pod_that_asks_for_devices_gets_every_rule():
    pod = MANAGED.shape("Pod", gpu_pod())
    spec, meta = pod["spec"], pod["metadata"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["nodeSelector"] == {"pool": "gpu"} and spec["runtimeClassName"] == "nvidia"
    assert spec["imagePullSecrets"] == [{"name": "mirror"}] and spec["priorityClassName"] == "batch"
    assert meta["labels"] == {"cost": "42", RUN_LABEL: "run1"} and meta["annotations"]["owner"] == "platform team"
    assert spec["containers"][0]["image"] == "mirror.example/pause:3.10"


def test_a_pod_without_devices_is_tolerated_everywhere_but_not_sent_to_the_gpu_pool():
    spec = MANAGED.shape("Pod", builders.pod("kwok", "run1"))["spec"]
    assert spec["tolerations"] and "nodeSelector" not in spec and "runtimeClassName" not in spec


def test_a_pod_pinned_to_a_node_keeps_its_pin_beside_the_pools_label():
    spec = MANAGED.shape("Pod", gpu_pod(node_name="gpu-3"))["spec"]
    assert spec["nodeSelector"] == {"pool": "gpu", "kubernetes.io/hostname": "gpu-3"}


def test_a_pod_for_the_runs_own_simulated_nodes_keeps_its_placement():
    body = gpu_pod()
    body["spec"]["tolerations"] = [{"key": "dra-harness.io/contention", "operator": "Exists", "effect": "NoSchedule"}]
    spec = MANAGED.shape("Pod", body)["spec"]
    assert "nodeSelector" not in spec and len(spec["tolerations"]) == 2


def test_pod_templates_of_workloads_and_namespaces_are_shaped_and_the_input_is_not_changed():
    deployment = {"metadata": {"name": "d"}, "spec": {"template": gpu_pod()}}
    shaped = MANAGED.shape("Deployment", deployment)
    assert shaped["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert "nodeSelector" not in deployment["spec"]["template"]["spec"]  # a copy: builders' bodies are reused
    ns = MANAGED.shape("Namespace", {"metadata": {"name": "n", "labels": {RUN_LABEL: "run1"}}})
    assert ns["metadata"]["labels"] == {"team": "ml", RUN_LABEL: "run1"}


def test_no_rules_leave_every_body_as_it_is():
    body = gpu_pod()
    assert ClusterRules().shape("Pod", body) is body and not ClusterRules()


def test_the_provenance_names_a_pull_secret_and_never_holds_its_data():
    described = MANAGED.describe()
    assert described["image_pull_secrets"] == ["infra/mirror"]
    assert described["tolerations"] == ["nvidia.com/gpu:NoSchedule"]


def test_a_cluster_profile_file_gives_the_rules_and_options_add_to_it(tmp_path):
    profile = tmp_path / "gke.yaml"
    profile.write_text("toleration: ['nvidia.com/gpu:NoSchedule']\n"
                       "node-selector: {cloud.google.com/gke-accelerator: nvidia-h100-80gb}\n"
                       "namespace-label: [team=ml]\nruntime-class: nvidia\n")
    config = RunConfig.of({"cluster_profile": str(profile), "toleration": ["dedicated=gpu:NoSchedule"]})
    got = cluster_rules(config)
    assert [rules.toleration_text(t) for t in got.tolerations] == ["nvidia.com/gpu:NoSchedule", "dedicated=gpu:NoSchedule"]
    assert got.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert got.namespace_labels == {"team": "ml"} and got.runtime_class == "nvidia"


@pytest.mark.parametrize("text, where", [
    ("tolerations: [a]\n", "tolerations: not a key of a cluster profile"),
    ("runtime-class: [nvidia]\n", "runtime-class: must be a string"),
    ("node-selector: [pool=a b]\n", "node-selector[0]: expected KEY=VALUE"),
    ("image-pull-secret: [s3cr3t-not-a-ref]\n", "image-pull-secret[0]: expected NAMESPACE/NAME"),
])
def test_a_bad_profile_is_one_line_naming_the_file_and_key_never_the_value(tmp_path, text, where):
    profile = tmp_path / "p.yaml"
    profile.write_text(text)
    with pytest.raises(InputError) as e:
        build({}, str(profile))
    assert f"cluster profile {profile}: {where}" in str(e.value) and "\n" not in str(e.value)
    assert "s3cr3t" not in str(e.value) and "a b" not in str(e.value)


def test_run_refuses_a_bad_toleration_in_one_line_before_anything_is_written(tmp_path):
    from click.testing import CliRunner

    from dra_harness.cli import main

    result = CliRunner().invoke(main, ["run", "--cluster", "existing", "--kubeconfig", str(tmp_path / "none"),
                                       "--toleration", "nvidia.com/gpu:NoSchedul", "--report-dir", str(tmp_path / "out")])
    assert result.exit_code == 2 and "--toleration: the effect must be one of" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()
