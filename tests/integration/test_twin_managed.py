"""A managed GPU offering's rules on a staging twin drawn from today's seed: no FAIL without options, and the options
the preflight names let the run establish its checks.

The shape: a provider's taint on every GPU node (drawn from GKE's, AKS's and an operator's), tolerated by the driver's
DaemonSet as a GPU pool's installation has it, and a policy that refuses namespaces without a ``team`` label. A module
of its own so that it runs beside the drawn shapes, on another test worker.
"""

from __future__ import annotations

import json
import random

import pytest

from dra_harness.kube import rules
from dra_harness.providers.embedded import twin_managed
from dra_harness.providers.embedded.twin import Shape

from .test_twin_shapes import SEED
from .twins import run

pytestmark = pytest.mark.cluster


def test_a_managed_gpu_offering_fails_nothing_names_its_options_and_with_them_the_run_establishes_its_checks(
        binaries, tmp_path):
    """Run as a new user would: without options, no FAIL and exit 3 with the one line that says why and what to pass;
    with the options the preflight named (the policy's label value is the user's to know), no FAIL and at least 80 %
    of what the same twin establishes once its managed rules are lifted."""
    rng = random.Random(SEED)
    shape = Shape(seed=SEED, gpu_taint=rng.randrange(len(twin_managed.PROVIDER_TAINTS)), namespace_label="team")
    print(f"\nshape {shape.describe()}")
    with run.twin_cluster(shape, tmp_path / "twin") as (cluster, made):
        bare = run.judge(cluster, made, tmp_path / "bare", extra=("--min-established=50",), exits=(3,))
        named = json.loads((tmp_path / "bare" / "preflight.json").read_text())["hints"]
        tolerations = [h.split()[1] for h in named if h.startswith("--toleration ")]
        options = (*(f"--toleration={t}" for t in tolerations), "--namespace-label=team=ml")
        complied = run.judge(cluster, made, tmp_path / "complied", extra=options, exits=(0, 3))
        twin_managed.lift(cluster.kube(), cluster.state().spec.all_node_names(), shape.taint, shape.namespace_label)
        plain = run.judge(cluster, made, tmp_path / "plain", exits=(0, 3))
    print("| the twin | options | passed | not established | skipped | failed | minutes |")
    for judgement, rules_, given in ((bare, "managed", "none"), (complied, "managed", " ".join(options)),
                                     (plain, "lifted", "none")):
        print(f"| {rules_} | {given} {judgement.row().split('|', 2)[2]}")
    assert tolerations == [rules.toleration_text({**shape.taint, "operator": "Exists"})], named
    assert any(h.startswith("--namespace-label KEY=VALUE") for h in named), named
    assert bare.ok, bare.explain()
    assert "tested too little: established" in bare.output and "--toleration" in bare.output, bare.output[-2000:]
    assert complied.ok and plain.ok, complied.explain() + "\n" + plain.explain()
    # Established: passed (a FAIL would have failed the judgements above).
    assert complied.outcomes["passed"] >= 0.8 * plain.outcomes["passed"], complied.explain() + "\n" + plain.explain()
