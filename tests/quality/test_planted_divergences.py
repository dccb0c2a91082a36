"""The lock-step differ finds each planted divergence at its step and field, and shrinks it.

Each case plants one wrong observable at one step of the reference (a
`PerturbedEngine`) on the seed-preemption workload, whose 76 steps include
preemptions, resumptions and two waiting requests. The differ must report
exactly that step and field; the shrinker must keep the divergence at that
step while reducing the workload to the pinned size
(requests, aborts, prompt tokens, max_tokens, arrival steps, max_steps).
"""

import pytest

from schedspec.conformance.demo_engines.planted import perturbed
from schedspec.conformance.harness.differ import diff
from schedspec.conformance.harness.shrink import shrink, size
from schedspec.conformance.workloads.builtin import BUILTIN
from schedspec.reference_impl import ReferenceEngine

CASES = [
    # field, step, reported field, shrunk size
    ("tokens", 5, "output.num_scheduled_tokens", (1, 0, 1, 6, 0, 6)),
    ("order", 5, "output.num_scheduled_tokens", (2, 0, 2, 12, 0, 6)),
    ("block_ids", 0, "output.scheduled_new_reqs[p0].block_ids", (1, 0, 1, 1, 0, 1)),
    ("preempted", 5, "output.preempted_req_ids", (1, 0, 1, 5, 0, 6)),
    ("free_blocks", 5, "state.num_free_blocks", (1, 0, 1, 5, 0, 6)),
    ("waiting_order", 38, "state.waiting", (4, 0, 162, 150, 0, 39)),
]


@pytest.mark.parametrize("field,step,reported,shrunk", CASES, ids=[c[0] for c in CASES])
def test_planted_divergence_found_at_its_step_and_shrunk(field, step, reported, shrunk):
    workload = BUILTIN["seed-preemption"]()
    engine = perturbed(field, step)
    found = diff(workload, ReferenceEngine, engine).divergence
    assert (found.step, found.field) == (step, reported)
    assert found.a != found.b

    def same_step(w):
        d = diff(w, ReferenceEngine, engine).divergence
        return d is not None and d.step == step

    small, _ = shrink(workload, same_step)
    assert size(small) == shrunk
    assert size(small) < size(workload)
    assert same_step(small)


def test_identical_engines_do_not_diverge():
    """The control: the unperturbed reference against itself never diverges."""
    workload = BUILTIN["seed-preemption"]()
    result = diff(workload, ReferenceEngine, ReferenceEngine)
    assert result.divergence is None and result.steps_compared == 76
