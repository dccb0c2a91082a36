"""Views from a trace agree with views from the full states they summarize.

`views_from_trace` rebuilds what a trace leaves out (block tables, drafts,
placeholders, in-flight and stale tokens) from the step records alone. Here
the reference runs the new feature families step by step, its full state is
frozen after every step, and every number the replay rebuilt is compared
with the state's own. The async family is the hard case: there the state
after a step is this step's schedule() plus the update of an older step.
"""

import pytest

from schedspec.conformance.workloads.families import generate
from schedspec.reference_impl import ReferenceEngine
from schedspec.spec import engine as engine_loop
from schedspec.spec.invariants.build import counts_of, shared_refs
from schedspec.spec.invariants.replay import TraceReplay
from schedspec.spec.trace import Trace

FIELDS = (
    "num_computed_tokens",
    "num_tokens",
    "num_blocks",
    "num_spec_tokens",
    "num_output_placeholders",
    "num_in_flight_tokens",
    "num_stale_output_tokens",
)


def _rows_and_states(workload):
    engine = ReferenceEngine(workload.config)
    records, states = [], []
    for rec in engine_loop.steps(engine, workload):
        records.append(rec)
        states.append(engine.state())
    replay = TraceReplay(Trace(workload, tuple(records)))
    for rec, state in zip(records, states):
        yield rec, replay.step(rec), state


@pytest.mark.parametrize("family", ["prefix-caching", "spec-decode", "async"])
def test_replayed_counters_are_the_states_own(family):
    checked = {f: 0 for f in FIELDS}
    for index in range(40):
        w = generate(family, 0, index)
        for rec, view, state in _rows_and_states(w):
            held = {rid: r.block_ids for rid, r in state.requests.items()}
            assert view.post_num_shared_block_refs == shared_refs(held), (w.name, rec.step)
            assert view.ids_consistent, (w.name, rec.step, view.ids_problem)
            for row in view.rows:
                if not row.post_live:
                    continue
                want = counts_of(state.requests[row.request_id])
                for f in FIELDS:
                    got = getattr(row, f"post_{f}")
                    assert got == getattr(want, f), (w.name, rec.step, row.request_id, f, got, getattr(want, f))
                    checked[f] += got != 0
    # Each family exercises what it is for: a replay that always said 0 would pass the comparison vacuously.
    wanted = {
        "prefix-caching": ["num_blocks"],
        "spec-decode": ["num_spec_tokens"],
        "async": ["num_output_placeholders", "num_in_flight_tokens"],
    }[family]
    assert all(checked[f] > 0 for f in wanted), checked


def test_shared_prefix_blocks_are_counted_once():
    """Some prefix-caching workload shares blocks, and conservation still holds on it (distinct blocks)."""
    from schedspec.reference_impl import simulate
    from schedspec.spec.invariants import check_trace
    from schedspec.spec.invariants.replay import views_from_trace

    shared = 0
    for index in range(40):
        trace = simulate(generate("prefix-caching", 0, index))
        shared += sum(v.post_num_shared_block_refs for v in views_from_trace(trace))
        assert check_trace(trace) == []
    assert shared > 0
