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
    """A managed shape drawn from the seed (a provider's taint on every GPU node, a namespace-label policy), run as
    a new user would: without options, no FAIL and exit 3 with the one line that says why and what to pass; then
    with the options the preflight named (the policy's label value is the user's to know), no FAIL and exit 0."""
    rng = random.Random(SEED)
    shape = Shape(seed=SEED, gpu_taint=rng.randrange(len(twin_managed.PROVIDER_TAINTS)), namespace_label="team")
    print(f"\nshape {shape.describe()}")
    with run.twin_cluster(shape, tmp_path / "twin") as (cluster, made):
        bare = run.judge(cluster, made, tmp_path / "bare", extra=("--min-established=50",), exits=(3,))
        named = json.loads((tmp_path / "bare" / "preflight.json").read_text())["hints"]
        tolerations = [h.split()[1] for h in named if h.startswith("--toleration ")]
        options = (*(f"--toleration={t}" for t in tolerations), "--namespace-label=team=ml", "--min-established=50")
        complied = run.judge(cluster, made, tmp_path / "complied", extra=options)
    print("| managed shape | options | passed | not established | skipped | failed | minutes |")
    for judgement, given in ((bare, "none"), (complied, " ".join(options[:-1]))):
        print(f"| {shape.describe().split('managed rules ')[1]} | {given} {judgement.row().split('|', 2)[2]}")
    assert tolerations == [rules.toleration_text({**shape.taint, "operator": "Exists"})], named
    assert any(h.startswith("--namespace-label KEY=VALUE") for h in named), named
    assert bare.ok, bare.explain()
    assert "tested too little: established" in bare.output and "--toleration" in bare.output, bare.output[-2000:]
    assert complied.ok, complied.explain()
    established = complied.outcomes["passed"] + complied.outcomes["failed"]
    assert established >= 2 * max(1, bare.outcomes["passed"]), (bare.explain(), complied.explain())
