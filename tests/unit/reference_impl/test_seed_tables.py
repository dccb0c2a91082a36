"""The seed's tables: seed 000's two num_tokens / num_computed_tokens tables, and the vLLM CPU guide's §9 traces.

Sources: /work/shared/seeds/000_11ffc5e833a3969b.txt (prompt A B C generating D E F G; a 20000-token
prompt in chunks 7992, 7992, 4016) and vllm-0.33-on-cpu.md §9 (scenario 1 and scenario 2).
"""

from __future__ import annotations

import pytest

from helpers import config, make_request, new_state, sched_dict, step

from schedspec.conformance.workloads.builtin import BUILTIN
from schedspec.reference_impl import simulate
from schedspec.spec.request import RequestStatus

A, B, C, D, E, F, G = (ord(ch) for ch in "ABCDEFG")


def test_seed000_abc_generates_defg():
    """Seed 000 table 1: prompt A B C generating D E F G; (num_tokens, num_computed_tokens, owed) per step:
    3/0/3 at submission, then 4/3/1, 5/4/1, 6/5/1 — decode always owes exactly 1."""
    state = new_state(config(), make_request("r", prompt=[A, B, C], max_tokens=4, eos_token_id=None))

    def row():
        r = state.requests["r"]
        return (r.num_tokens, r.num_computed_tokens, r.num_owed_tokens)

    assert row() == (3, 0, 3)
    rows, granted = [], []
    for token in (D, E, F):
        out, state, _ = step(state, tokens_for={"r": [token]})
        granted.append(sched_dict(out)["r"])
        rows.append(row())
    assert rows == [(4, 3, 1), (5, 4, 1), (6, 5, 1)]
    assert granted == [3, 1, 1]  # the whole prompt at once, then one owed token per step
    out, state, finished = step(state, tokens_for={"r": [G]})
    assert sched_dict(out) == {"r": 1}
    assert finished["r"].output_token_ids == (D, E, F, G)
    assert finished["r"].status == RequestStatus.FINISHED_LENGTH_CAPPED


@pytest.fixture(scope="module")
def long_prompt_trace():
    return simulate(BUILTIN["seed-long-prompt"]())


def test_seed000_long_prompt_in_three_chunks(long_prompt_trace):
    """Seed 000 table 2: a 20000-token prompt beside 200 decodes under an 8192 budget: (T, C, owed)
    20000/0/20000, then 20000/7992/12008, 20000/15984/4016, 20001/20000/1."""
    steps = long_prompt_trace.steps
    assert steps[1].added == ("long",)
    rows = []
    for s in steps[1:4]:
        r = s.state.requests["long"]
        rows.append((r.num_tokens, r.num_computed_tokens, r.num_tokens - r.num_computed_tokens))
    assert rows == [(20000, 7992, 12008), (20000, 15984, 4016), (20001, 20000, 1)]
    assert [s.output.num_scheduled_tokens["long"] for s in steps[1:4]] == [7992, 7992, 4016]


def test_cpu_guide_scenario1_table(long_prompt_trace):
    """vllm-0.33-on-cpu.md §9 scenario 1: warm-up 6400 tokens / 200 requests; then per step
    (total, decode requests, decode tokens, long) = (8192,200,200,7992), (8192,200,200,7992),
    (4216,200,200,4016), (201,200,200,1), (201,200,200,1)."""
    steps = long_prompt_trace.steps
    warm = steps[0].output
    assert (warm.total_num_scheduled_tokens, len(warm.num_scheduled_tokens)) == (6400, 200)
    table = []
    for s in steps[1:6]:
        n = s.output.num_scheduled_tokens
        decodes = {k: v for k, v in n.items() if k != "long"}
        assert set(decodes.values()) == {1}
        table.append((s.output.total_num_scheduled_tokens, len(decodes), sum(decodes.values()), n["long"]))
    assert table == [
        (8192, 200, 200, 7992),
        (8192, 200, 200, 7992),
        (4216, 200, 200, 4016),
        (201, 200, 200, 1),
        (201, 200, 200, 1),
    ]


# Scenario 2 (num_blocks=20, 4 x 60-token prompts, max_tokens 40):
# step: (num_scheduled_tokens, preempted, new, finished, free blocks, running, waiting)
SCENARIO_2 = {
    0: ({"p0": 60, "p1": 60, "p2": 60, "p3": 60}, set(), ["p0", "p1", "p2", "p3"], set(), 3, 4, 0),
    5: ({"p0": 1, "p1": 1, "p2": 1}, {"p3"}, [], set(), 4, 3, 1),
    37: ({"p0": 1, "p1": 1}, {"p2"}, [], set(), 5, 2, 2),
    40: ({"p2": 97, "p3": 65}, set(), ["p2", "p3"], {"p0", "p1"}, 7, 2, 0),
    43: ({"p3": 1}, set(), [], {"p2"}, 14, 1, 0),
    75: ({}, set(), [], {"p3"}, 19, 0, 0),
}


@pytest.fixture(scope="module")
def preemption_trace():
    return simulate(BUILTIN["seed-preemption"]())


@pytest.mark.parametrize("step_no", sorted(SCENARIO_2))
def test_cpu_guide_scenario2_event_steps(preemption_trace, step_no):
    """vllm-0.33-on-cpu.md §9 scenario 2 (seed-preemption): preemptions p3 at step 5 and p2 at step 37;
    step 40 {p2: 97, p3: 65} (prompt + generated tokens recomputed); free blocks 3, 4, 5, 7, 14, 19."""
    expected = SCENARIO_2[step_no]
    s = preemption_trace.steps[step_no]
    o = s.output
    got = (
        dict(o.num_scheduled_tokens),
        set(o.preempted_req_ids),
        [r.req_id for r in o.scheduled_new_reqs],
        set(o.finished_req_ids),
        s.state.num_free_blocks,
        len(s.state.running),
        len(s.state.waiting),
    )
    assert got == expected


def test_cpu_guide_scenario2_nothing_happens_elsewhere(preemption_trace):
    """Scenario 2 lists every step where something happens: no other step preempts, admits or reports a finish;
    the run drains after step 75 (76 steps)."""
    assert preemption_trace.end == "drained"
    assert len(preemption_trace.steps) == 76
    for s in preemption_trace.steps:
        if s.step in SCENARIO_2:
            continue
        o = s.output
        assert not o.preempted_req_ids and not o.scheduled_new_reqs and not o.finished_req_ids, s.step


def test_cpu_guide_scenario2_resumed_flags(preemption_trace):
    """Step 40: p2 and p3 come back as resumed (V2 layout: listed among the new requests), not as first admissions."""
    o = preemption_trace.steps[40].output
    assert [(r.req_id, r.resumed, r.num_computed_tokens) for r in o.scheduled_new_reqs] == [
        ("p2", True, 0),
        ("p3", True, 0),
    ]
