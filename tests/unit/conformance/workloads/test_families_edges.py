"""The release edges (`conformance/workloads/edges.py`) reach the rules that chance rarely reaches.

A workload reaches a variant rule when the reference at the release before it parts from the reference with
the rule taken early. The spec-decode family's edges alone must reach each of the three rules they are drawn
for; without them, 1,000 workloads of the default campaign reached `padding-needs-room-to-sample` zero times
(`benchmarks/variant_reach.py`, docs/versions.md).
"""

import dataclasses

import pytest

from schedspec.conformance.harness.differ import diff
from schedspec.conformance.workloads.edges import EDGE_MAX_STEPS, EDGES, WithEdges
from schedspec.conformance.workloads.families import FAMILIES, FEATURE_MAX_STEPS, at_release, generate
from schedspec.reference_impl import ReferenceEngine
from schedspec.spec.versions import BY_NAME, RELEASES

EDGE_INDICES = range(3, 3 + 4 * 40, 4)  # the spec-decode family's every fourth workload: 40 edges


def reaches(workload, variant: str) -> bool:
    before = RELEASES[RELEASES.index(BY_NAME[variant].since) - 1]
    early = f"{before}+{variant}"
    w = at_release(workload, before)
    return (
        diff(
            w, ReferenceEngine, lambda c: ReferenceEngine(dataclasses.replace(c, vllm_version=early)), "blocks"
        ).divergence
        is not None
    )


@pytest.mark.parametrize(
    "variant", ["padding-needs-room-to-sample", "padding-after-prefix-hit", "sync-spec-decode-caches-on-update"]
)
def test_the_edges_reach_each_rule_they_are_drawn_for(variant):
    edges = [generate("spec-decode", 0, i) for i in EDGE_INDICES]
    assert sum(reaches(w, variant) for w in edges) >= 2, variant


def test_only_every_fourth_spec_decode_workload_is_an_edge():
    family = FAMILIES["spec-decode"]
    assert isinstance(family, WithEdges) and family.strata == 4
    steps = [generate("spec-decode", 0, i).max_steps for i in range(40)]
    assert steps == [EDGE_MAX_STEPS if i % 4 == 3 else FEATURE_MAX_STEPS for i in range(40)]


def test_both_edge_shapes_are_drawn():
    edges = [generate("spec-decode", 0, i) for i in EDGE_INDICES]
    continued = [w for w in edges if w.requests[0].spec_proposals]  # `a` decodes with drafts accepted
    admissions = [w for w in edges if w.requests[0].request.max_tokens == 1]  # `a` leaves its blocks cached
    assert len(EDGES) == 2 and continued and admissions and len(continued) + len(admissions) == len(edges)
