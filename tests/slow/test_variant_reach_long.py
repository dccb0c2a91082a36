"""The default campaign reaches every rule that changed between 0.28.0 and 0.33.0 (issue #17: "the workload
families must be able to reach every rule that changed").

By the reference alone (`benchmarks/variant_reach.py`): the reference at the release before each rule parts
from the reference with the rule taken early on at least a few of the 1,000 workloads that
`schedspec changelog A B --workloads 1000` runs. About 30 s.
"""

import dataclasses

import pytest

from schedspec.conformance.harness.differ import diff
from schedspec.conformance.workloads.families import FAMILIES, at_release, generate
from schedspec.reference_impl import ReferenceEngine
from schedspec.spec.versions import RELEASES, VARIANTS

WORKLOADS = 1000


@pytest.mark.parametrize("variant", [v for v in VARIANTS if not v.config_only], ids=lambda v: v.name)
def test_the_default_campaign_reaches_the_rule(variant):
    before = RELEASES[RELEASES.index(variant.since) - 1]
    early = f"{before}+{variant.name}"
    families = list(FAMILIES)
    reached = 0
    for k in range(WORKLOADS):
        w = at_release(generate(families[k % len(families)], 0, k // len(families)), before)
        r = diff(w, ReferenceEngine, lambda c: ReferenceEngine(dataclasses.replace(c, vllm_version=early)), "blocks")
        reached += r.divergence is not None
    assert reached >= 3, (variant.name, reached)
