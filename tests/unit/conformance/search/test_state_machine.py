"""The Hypothesis state machine over the reference, fast profile: every invariant holds on every step.

The machine (`conformance/search/state_machine.py`) adds, aborts and steps, and
asserts every catalogue invariant and both trace checks after each step. The
fast profile (100 examples of up to 30 rules, derandomized) runs in seconds;
`tests/slow/test_state_machine_long.py` runs thousands. The other tests here
check the machine itself: that what it draws is what vLLM accepts, that a
finding replays as an ordinary workload, and that a hunt its seconds cap stops is unknown.
"""

import time

import pytest
from hypothesis import given, settings, strategies as st

from schedspec.conformance.search.budget import SearchCut
from schedspec.conformance.search.state_machine import (
    TRACE_CHECKS,
    Bounds,
    SchedulerMachine,
    make_config,
    make_request,
)
from schedspec.conformance.search.state_machine_draws import raw_draws
from schedspec.conformance.search.state_machine_kill import FAST, kill_by_state_machine
from schedspec.mutants import BY_NAME, applied
from schedspec.reference_impl import simulate
from schedspec.spec.arith import cdiv
from schedspec.spec.invariants import INVARIANTS, check_trace

TestReferenceStateMachine = SchedulerMachine.TestCase
TestReferenceStateMachine.settings = FAST


def test_every_check_is_an_invariant_of_the_machine():
    checks = {n for n in dir(SchedulerMachine) if n.startswith(("catalogue_", "trace_"))}
    assert checks == {f"catalogue_{i:02d}_{inv.name.replace('-', '_')}" for i, inv in enumerate(INVARIANTS)} | {
        f"trace_{name.replace('-', '_')}" for name in TRACE_CHECKS
    }
    assert all(hasattr(getattr(SchedulerMachine, n), "hypothesis_stateful_invariant") for n in checks)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_drawn_configs_and_requests_are_what_vllm_accepts(data):
    b = Bounds()
    config = make_config(data.draw(raw_draws(b)[0]), b)  # SchedulerConfig validates as vLLM does; this would raise
    L = config.max_model_len
    assert config.num_usable_blocks >= cdiv(L, config.block_size)  # one max_model_len sequence fits
    assert config.enable_chunked_prefill or config.max_num_batched_tokens >= L
    w = make_request(data.draw(raw_draws(b)[1]), config, b, 3, 0)
    q = w.request
    assert 1 <= q.num_prompt_tokens < L and 0 <= q.min_tokens <= q.max_tokens
    assert config.policy == "priority" or (q.priority == 0 and q.arrival_time == 3.0)


def test_a_finding_replays_as_a_workload_through_the_monitors():
    mutant = BY_NAME["Z14-double-free"]
    finding = kill_by_state_machine(mutant, max_examples=200, expect=mutant.expect)
    assert finding is not None and finding.what == "block-conservation"
    requests, steps = finding.size
    assert len(finding.workload.requests) == requests and finding.workload.max_steps == steps + 1
    assert finding.step == steps - 1
    with applied(mutant):
        violations = check_trace(simulate(finding.workload))
    assert [v.invariant for v in violations][:1] == ["block-conservation"]
    assert check_trace(simulate(finding.workload)) == []


def test_a_hunt_stopped_by_its_safety_cap_is_unknown_not_a_pass():
    """The count decides; the seconds cap only stops a runaway, and a hunt it stops is never "nothing found"."""
    t0 = time.perf_counter()
    with pytest.raises(SearchCut) as cut:
        kill_by_state_machine(None, budget_s=1.0, max_examples=10**6)
    assert time.perf_counter() - t0 < 5
    assert 0 < cut.value.done < cut.value.planned == 10**6 and str(cut.value).startswith("budget spent")


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_drawn_feature_configs_are_what_vllm_accepts(data):
    b = Bounds(features=True)
    config = make_config(data.draw(raw_draws(b)[0]), b)  # would raise on the exp1 crash config, among others
    k, thr = config.num_speculative_tokens, config.long_prefill_token_threshold
    assert not (k > 0 and 1 <= thr < 1 + k)
    w = make_request(data.draw(raw_draws(b)[1]), config, b, 0, 0)
    assert all(0 <= a <= d <= k for d, a in w.spec_proposals) and (k > 0 or not w.spec_proposals)


def test_the_feature_machine_holds_on_the_reference():
    """Prefix caching, spec decode and async scheduling (batch queues of 2 and 3) drawn: every check holds."""
    finding = kill_by_state_machine(None, max_examples=150, bounds=Bounds(features=True))
    assert finding is None, finding.original
