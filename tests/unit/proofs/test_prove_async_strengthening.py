"""The async strengthening `placeholders-match-in-flight` holds on the reference, and is not vacuous there.

It is the state invariant that an inductive proof of async scheduling needs
(docs/proofs.md, "Async scheduling"): without it, a symbolic pre-state may
hold placeholders that no step in flight accounts for. A state invariant
earns its place in the catalogue only if every reachable state satisfies
it, so it is checked here on the reference's own engine loop (batch queue of
2) and, for stale output, on vLLM's own preemption scenario driven by hand
with three steps in flight (§6: a preempted request whose output
is still in flight).
"""

from __future__ import annotations

from schedspec.conformance.workloads.families import generate
from schedspec.reference_impl import api, simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.invariants import BY_NAME
from schedspec.spec.invariants.build import view_from_states
from schedspec.spec.invariants.replay import views_from_trace
from schedspec.spec.output import ModelRunnerOutput, SchedulerOutput
from schedspec.spec.request import Request, RequestStatus

STRENGTHENING = BY_NAME["placeholders-match-in-flight"]


def test_the_strengthening_is_a_state_invariant_of_the_catalogue():
    assert STRENGTHENING.state


def test_it_holds_on_every_step_of_the_async_family_and_meets_placeholders():
    seen = {"placeholders": 0, "drafts in flight": 0, "prefill chunk in flight": 0}
    for i in range(120):
        for view in views_from_trace(simulate(generate("async", 0, i))):
            assert STRENGTHENING.holds(view), (i, view)
            for r in view.rows:
                P, I = r.post_num_output_placeholders, r.post_num_in_flight_tokens
                seen["placeholders"] += r.post_live and P > 0
                seen["drafts in flight"] += r.post_live and P > 1  # 1 + drafts scheduled
                seen["prefill chunk in flight"] += r.post_live and I > 0 and P == 0
    assert all(seen.values()), seen


def _req(rid: str) -> Request:
    return Request(request_id=rid, prompt_token_ids=(int(rid[-1]) + 1,) * 32, max_tokens=8, ignore_eos=True)


def test_it_holds_with_stale_output_in_flight():
    """§6 [observed]: 2 x 32 tokens in 4 usable blocks; step 2 preempts r1 with its step-1 output in flight."""
    state = api.initial_state(SchedulerConfig(async_scheduling=True, num_gpu_blocks=5))
    for rid in ("r0", "r1"):
        state = api.add_request(state, _req(rid))
    in_flight, stale_seen = [], False

    def check(s):
        assert STRENGTHENING.holds(view_from_states(s, SchedulerOutput(), s))

    for _ in range(3):  # three steps in flight, deeper than the engine loop's queue of 2
        out, state = api.schedule(state)
        in_flight.append(out)
        check(state)
        stale_seen |= any(r.num_stale_output_tokens > 0 for r in state.requests.values())
    assert state.requests["r1"].status == RequestStatus.PREEMPTED and stale_seen
    while in_flight:
        out = in_flight.pop(0)
        state, _ = api.update_from_output(
            state, out, ModelRunnerOutput({rid: (7,) for rid in out.num_scheduled_tokens})
        )
        check(state)
