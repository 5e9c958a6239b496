"""A managed GPU offering's rules on a staging twin drawn from today's seed: no FAIL without options, and the options
the preflight names let the run establish its checks.

The shape (:func:`.twins.shapes.draw_managed`): drawn from a provider's taint on every GPU node (GKE's, AKS's, an
operator's), tolerated by the driver's DaemonSet as a GPU pool's installation has it; a policy that refuses namespaces
without a ``team`` label; a policy that refuses GPU pods without the pool's RuntimeClass; an image policy admitting
one registry; PodSecurity ``restricted`` by the API server's default. A module of its own so that it runs beside the
drawn shapes, on another test worker.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dra_harness.kube import rules
from dra_harness.providers.embedded import twin_managed

from .test_twin_shapes import SEED
from .twins import run, shapes

pytestmark = pytest.mark.cluster


def test_a_managed_gpu_offering_fails_nothing_names_its_options_and_with_them_the_run_establishes_its_checks(
        binaries, tmp_path):
    """Run as a new user would: without options, no FAIL and exit 3 with the one line that says why and what to pass;
    with the options the preflight named (the policy's label value, the RuntimeClass and the mirror are the user's
    to know), no FAIL and at least 80 % of what the same twin establishes once its managed rules are lifted."""
    shape = shapes.draw_managed(SEED)
    print(f"\nshape {shape.describe()}")
    with run.twin_cluster(shape, tmp_path / "twin") as (cluster, made):
        bare = run.judge(cluster, made, tmp_path / "bare", extra=("--min-established=50",), exits=(0, 3))
        named = json.loads((tmp_path / "bare" / "preflight.json").read_text())["hints"]
        tolerations = [h.split()[1] for h in named if h.startswith("--toleration ")]
        if shape.namespace_label and (shape.runtime_class or shape.registry):
            # A refused namespace keeps the pod probe from running: what a pod needs is named by the preflight
            # the user runs next, with the namespace label given (the label's value is theirs to know).
            named += _preflight(made, tmp_path / "second.json", "--namespace-label=team=ml",
                                *(f"--toleration={t}" for t in tolerations))["hints"]
        options = (*(f"--toleration={t}" for t in tolerations),
                   *(["--namespace-label=team=ml"] if shape.namespace_label else []),
                   *([f"--runtime-class={twin_managed.GPU_RUNTIME_CLASS}"] if shape.runtime_class else []),
                   *([f"--pause-image={twin_managed.MIRRORED_PAUSE}"] if shape.registry else []))
        complied = run.judge(cluster, made, tmp_path / "complied", extra=options, exits=(0, 3))
        twin_managed.lift(cluster.kube(), cluster.state().spec.all_node_names(), shape.taint, shape.namespace_label,
                          shape.runtime_class, shape.registry)
        plain = run.judge(cluster, made, tmp_path / "plain", exits=(0, 3))
    print("| the twin | options | passed | not established | skipped | failed | minutes |")
    for judgement, rules_, given in ((bare, "managed", "none"), (complied, "managed", " ".join(options)),
                                     (plain, "lifted", "none")):
        print(f"| {rules_} | {given} {judgement.row().split('|', 2)[2]}")
    print("preflight named:", *named, sep="\n  ")
    expected = [rules.toleration_text({**shape.taint, "operator": "Exists"})] if shape.taint else []
    assert tolerations == expected, named
    if shape.namespace_label:
        assert any(h.startswith("--namespace-label KEY=VALUE") for h in named), named
    if shape.runtime_class or shape.registry:  # the probe pod is refused by one policy or the other
        assert any("--runtime-class NAME" in h or "--pause-image" in h for h in named), named
    assert bare.ok, bare.explain()
    assert bare.exit_code == 0 or "tested too little: established" in bare.output, bare.output[-2000:]
    assert bare.exit_code == 3 or not (shape.taint or shape.runtime_class), bare.output[-2000:]  # those keep most out
    assert complied.ok and plain.ok, complied.explain() + "\n" + plain.explain()
    # Established: passed (a FAIL would have failed the judgements above).
    assert complied.outcomes["passed"] >= 0.8 * plain.outcomes["passed"], complied.explain() + "\n" + plain.explain()


def _preflight(made, out: Path, *options: str) -> dict:
    """``dra-harness preflight`` through the twin's ServiceAccount, as the user's next step; its facts."""
    done = subprocess.run([sys.executable, "-m", "dra_harness.cli", "preflight", "--kubeconfig", str(made.kubeconfig),
                           "--expected-hardware", str(made.expected_hardware), "--out", str(out), *options],
                          cwd=run.ROOT, capture_output=True, text=True, timeout=300)
    assert out.exists(), done.stderr[-2000:]
    return json.loads(out.read_text())
