"""The coverage map's event detectors (`conformance/campaign/events.py`), each on a small golden workload.

Every event fires on a workload written for it, with the count stated, and
stays silent on a near miss: the same workload with the one knob that
makes the event possible turned off, or a workload with a neighbouring
event (a victim that preempts itself is not a `preempt`; an abort of a
preempted request is not one of a waiting request). The detectors read the
records alone, so the last tests feed them edited records: a step the
RUNNING-pass replay cannot explain claims no pass-level event. The map's
impossible cells are checked on the mixed families here (a bounded sample)
and in tests/slow (thousands of workloads).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from schedspec.conformance.campaign.cell_coverage import (
    ALL_CELLS,
    EVENTS,
    IMPOSSIBLE,
    MODES,
    POSSIBLE_CELLS,
    Mode,
    cell,
    cells,
    impossible_reason,
    markdown_lines,
    summary,
)
from schedspec.conformance.campaign.events import EventTracker, events
from schedspec.conformance.workloads.families import FAMILIES, generate
from schedspec.conformance.workloads.mixed import MIXED_FAMILIES
from schedspec.reference_impl import simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.controls import Control
from schedspec.spec.request import Request
from schedspec.spec.workload import Abort, Grammar, Workload, WorkloadRequest


def r(
    rid, prompt, max_tokens, *, at=0, prio=0, planted=(), eos=None, stop=(), spec=(), tokens=None, grammar=None, lora=0
):
    """A request `rN` of `prompt` tokens (all N + 10 unless `tokens`), arriving at step `at`; `grammar` a
    `Grammar` (structured output)."""
    prompt_ids = tuple(tokens) if tokens is not None else (10 + int(rid[1:]),) * prompt
    stops = {"eos_token_id": eos, "stop_token_ids": tuple(stop)}
    request = Request(rid, prompt_ids, max_tokens, priority=prio, arrival_time=float(at), lora_int_id=lora, **stops)
    return WorkloadRequest(request, at, tuple(planted), tuple(spec), grammar)


def w(requests, aborts=(), max_steps=60, **config):
    """Budget 64, 8 sequences, L 64, blocks of 2 and 32 usable, unless `config` says otherwise."""
    base = dict(max_num_batched_tokens=64, max_num_seqs=8, max_model_len=64, block_size=2, num_gpu_blocks=33)
    return Workload(SchedulerConfig(**{**base, **config}), tuple(requests), tuple(aborts), max_steps=max_steps)


def fired(workload) -> Counter[str]:
    tracker = EventTracker(workload)
    seen = Counter()
    for rec in simulate(workload).steps:
        seen.update(tracker.step(rec))
    assert tracker.unexplained == 0  # the reference's own steps are always explained
    return seen + tracker.finish()


PREEMPT = w([r("r0", 4, 6), r("r1", 4, 6, at=1)], num_gpu_blocks=7)  # r0 grows into r1's blocks
D1 = w([r("r0", 4, 12)], num_gpu_blocks=5, max_steps=12)  # 16 tokens never fit 8: preempts itself for good
REFUND = w(
    [r("r0", 1, 4, prio=1), r("r1", 1, 3, at=1, prio=0)], num_gpu_blocks=4, policy="priority"
)  # r0, granted first, is the least important when r1 needs a block
PASSED = w(
    [r("r0", 1, 2, prio=1), r("r1", 2, 2, at=1, prio=0)], num_gpu_blocks=3, policy="priority", async_scheduling=True
)  # r0 is skipped (its last token is in flight, Z2) when r1 needs a block: the victim is behind the pass
THROTTLED = w([r("r0", 4, 6), r("r1", 4, 2, at=1)], prefill_schedule_interval=2, data_parallel_size=2)
POOLED = w([r("r0", 4, 1), r("r1", 64, 1)], runner="pooling", max_num_batched_tokens=32)
TWO_RUNNING = w([r("r0", 4, 8), r("r1", 4, 8, at=1)])
ADAPTIVE = dict(long_prefill_token_threshold=4, long_prefill_token_threshold_adaptive=True)
TWINS = [r("r0", 9, 2, tokens=range(9)), r("r1", 9, 2, at=4, tokens=range(9))]  # r1 hits r0's two full blocks
STRANGERS = [r("r0", 8, 1, tokens=range(8)), r("r1", 8, 1, at=3, tokens=range(20, 28))]

# event -> (a workload where it fires, how often; a near miss where it must not)
GOLDEN = {
    "skip": ((w([r("r0", 4, 3)], async_scheduling=True), 1), w([r("r0", 4, 3)])),
    "preempt": ((PREEMPT, 1), D1),
    "self_preempt": ((D1, 1), PREEMPT),
    "refund": ((REFUND, 1), PASSED),
    "preempt_skipped": ((PASSED, 1), REFUND),
    "prepend": ((w([r("r0", 4, 6), r("r1", 4, 6, at=1), r("r2", 4, 2, at=2)], num_gpu_blocks=7), 1), PREEMPT),
    "length_clamp": (
        (w([r("r0", 4, 20, spec=[(3, 3)] * 10)], max_model_len=8, num_speculative_tokens=3), 1),
        w([r("r0", 4, 20, spec=[(3, 3)] * 10)], max_model_len=64, num_speculative_tokens=3),
    ),
    "threshold_lone": (
        (w([r("r0", 20, 1)], long_prefill_token_threshold=4), 1),
        w([r("r0", 20, 1), r("r1", 20, 1)], **ADAPTIVE),
    ),
    "threshold_adaptive": (
        (w([r("r0", 20, 1), r("r1", 20, 1)], **ADAPTIVE), 1),
        w([r("r0", 20, 1), r("r1", 20, 1)], long_prefill_token_threshold=4),
    ),
    "pad": (
        (w([r("r0", 4, 6), r("r1", 1, 2, at=2)], num_speculative_tokens=2), 1),
        w([r("r0", 4, 6), r("r1", 1, 2, at=2)]),
    ),
    "prefix_hit": ((w(TWINS, block_size=4, enable_prefix_caching=True), 1), w(TWINS, block_size=4)),
    "eviction": (  # r1 takes the one block r0 never used, then one of r0's two cached ones
        (w(STRANGERS, block_size=4, num_gpu_blocks=4, enable_prefix_caching=True), 1),
        w(STRANGERS, block_size=4, enable_prefix_caching=True),
    ),
    "stale_output": (
        (w([r("r0", 4, 6), r("r1", 4, 6, at=1)], num_gpu_blocks=7, async_scheduling=True), 1),
        PREEMPT,
    ),
    "abort_running": ((w([r("r0", 4, 6)], [Abort(2, "r0")]), 1), w([r("r0", 4, 1)], [Abort(5, "r0")])),
    "abort_waiting": (
        (w([r("r0", 4, 6), r("r1", 4, 6)], [Abort(0, "r1")], max_num_seqs=1), 1),
        w([r("r0", 4, 6)], [Abort(2, "r0")]),
    ),
    "abort_preempted": (
        (w([r("r0", 4, 12)], [Abort(8, "r0")], num_gpu_blocks=5, max_steps=12), 1),
        w([r("r0", 4, 6), r("r1", 4, 6)], [Abort(0, "r1")], max_num_seqs=1),
    ),
    "abort_finished": ((w([r("r0", 4, 1)], [Abort(5, "r0")]), 1), w([r("r0", 4, 6)], [Abort(2, "r0")])),
    "livelock": ((D1, 1), w([r("r0", 4, 40)], max_steps=12)),  # the near miss is cut while it still progresses
    "stop_eos": ((w([r("r0", 4, 6, planted=[11, 2], eos=2)]), 1), w([r("r0", 4, 6, planted=[11, 2])])),
    "stop_token": (
        (w([r("r0", 4, 6, planted=[11, 5], stop=[5])]), 1),
        w([r("r0", 4, 6, planted=[11, 5], eos=5, stop=[5])]),  # EOS comes first (Z13)
    ),
    "stop_max_tokens": ((w([r("r0", 4, 3)]), 1), w([r("r0", 4, 30)], max_model_len=8)),
    "stop_max_model_len": ((w([r("r0", 4, 30)], max_model_len=8), 1), w([r("r0", 4, 3)])),
    "grammar_wait": (  # r1 is admitted past r0, whose grammar compiles only at step 3
        (w([r("r0", 4, 2, grammar=Grammar(3)), r("r1", 4, 2)]), 1),
        w([r("r0", 4, 2, grammar=Grammar(0)), r("r1", 4, 2)]),
    ),
    "lora_skip": (  # r1's adapter 2 waits while r0's adapter 1 runs (max_loras 1); r2, behind it, joins adapter 1
        (w([r("r0", 4, 3, lora=1), r("r1", 4, 2, lora=2), r("r2", 4, 2, lora=1)], max_loras=1), 1),
        w([r("r0", 4, 3, lora=1), r("r1", 4, 2, lora=2), r("r2", 4, 2, lora=1)], max_loras=2),
    ),
    "decode_cadence": (  # async PP 2: r0 samples in schedule() 1, so call 2 passes it over; it decodes in call 3
        (w([r("r0", 4, 2)], async_scheduling=True, pipeline_parallel_size=2), 1),
        w([r("r0", 4, 2)], async_scheduling=True),
    ),
    "prefill_deferred": (  # the DP engine core throttles step 1: r1's prefill waits while r0 decodes
        (THROTTLED.replace(throttle_prefills=(1,)), 1),
        THROTTLED,
    ),
    "grammar_error": (
        (w([r("r0", 4, 2, grammar=Grammar(1, fails=True)), r("r1", 4, 2)]), 1),
        w([r("r0", 4, 2, grammar=Grammar(1)), r("r1", 4, 2)]),
    ),
    "reset_preempted": (  # the reset at step 2 preempts r0 and r1, running; one without the running ones does not
        (TWO_RUNNING.replace(controls=(Control(2, "reset_prefix_cache", reset_running_requests=True),)), 2),
        TWO_RUNNING.replace(controls=(Control(2, "reset_prefix_cache"),)),
    ),
    "paused": (  # PAUSED_NEW at step 1 holds r1 (arriving then) back until the resume; a pause after the last arrival
        (TWO_RUNNING.replace(controls=(Control(1, "pause", mode="wait"), Control(3, "resume"))), 2),
        TWO_RUNNING.replace(controls=(Control(1, "pause", mode="wait", clear_cache=False), Control(1, "resume"))),
    ),
    # A pooling model: r0 (4 tokens) and r1 (64 = max_model_len, chunked by the budget of 32) are pooled; the near
    # miss is a generate model, whose requests end on max_tokens.
    "pooled": ((POOLED, 2), w([r("r0", 4, 1)])),
    "pooled_at_max_model_len": ((POOLED, 1), POOLED.replace(requests=POOLED.requests[:1])),
}


def test_every_event_has_a_golden_workload():
    assert set(GOLDEN) == set(EVENTS)


@pytest.mark.parametrize("event", list(GOLDEN))
def test_the_event_fires_on_its_workload(event):
    (workload, count), _ = GOLDEN[event]
    assert fired(workload)[event] == count


@pytest.mark.parametrize("event", list(GOLDEN))
def test_the_event_stays_silent_on_a_near_miss(event):
    _, near_miss = GOLDEN[event]
    assert fired(near_miss)[event] == 0


def test_the_golden_workloads_are_in_the_modes_they_name():
    """Each golden workload's cell is a possible one: the map and the goldens agree on what is reachable."""
    for event, ((workload, _), _) in GOLDEN.items():
        assert impossible_reason(event, Mode.of(workload.config)) is None, event


def test_a_step_the_replay_cannot_explain_claims_no_pass_event():
    """An engine whose step departs (here: the victim is not reported) gets no `preempt` for that step."""
    trace = simulate(PREEMPT)
    assert fired(PREEMPT)["preempt"] == 1
    edited = [
        dataclasses.replace(rec, output=dataclasses.replace(rec.output, preempted_req_ids=frozenset()))
        if rec.output.preempted_req_ids
        else rec
        for rec in trace.steps
    ]
    tracker = EventTracker(PREEMPT)
    seen = Counter()
    for rec in edited:
        seen.update(tracker.step(rec))
    assert seen["preempt"] == 0 and tracker.unexplained >= 1


def test_the_map_names_every_cell_once_and_every_impossible_rule_has_a_reason():
    assert len(MODES) == 16 and len(set(ALL_CELLS)) == len(EVENTS) * 16
    assert all(i.event in EVENTS and i.reason and i.modes for i in IMPOSSIBLE)
    assert all(any(i.where(m) for m in MODES) for i in IMPOSSIBLE)  # no rule that covers nothing
    assert len(POSSIBLE_CELLS) == 420 and len(ALL_CELLS) - len(POSSIBLE_CELLS) == 76


def test_no_impossible_cell_is_reached_on_a_bounded_sample():
    """60 workloads of each mixed family (15 per mode) and 8 of every other; tests/slow runs thousands."""
    reached = Counter()
    for family in FAMILIES:
        for index in range(60 if family in MIXED_FAMILIES else 8):
            workload = generate(family, 5, index)
            reached.update(cells(workload, simulate(workload).steps))
    assert not [c for c in reached if c not in POSSIBLE_CELLS]
    assert len([c for c in POSSIBLE_CELLS if reached[c]]) > 250  # and most of the possible ones are


def test_the_summary_lists_what_was_never_reached_and_the_markdown_shows_it():
    reached = Counter({cell("skip", MODES[4]): 3})  # fcfs-async
    s = summary(reached)
    assert s["cells_reached"] == 1 and s["cells_possible"] == 420 and len(s["never_reached"]) == 419
    # A sync skip needs pipeline parallel's batch queue, which the spec has without spec decode only.
    assert s["counts"][cell("skip", MODES[4])] == 3 and "skip@fcfs-sync-spec" not in s["counts"]
    text = "\n".join(markdown_lines(s))
    assert "1 of 420 possible cells reached" in text and "| skip | **0** | **0** | - | - | 3 |" in text
    assert "Never reached (419 cells):" in text and "- preempt_skipped: every mode it is possible in" in text
    assert "- skip: fcfs-sync, fcfs-sync-caching, fcfs-async-caching, fcfs-async-spec," in text


def test_events_counts_the_first_records_of_a_run():
    """A campaign counts the oracle's records up to a divergence: a prefix of a run is a valid input."""
    trace = simulate(PREEMPT)
    assert events(PREEMPT, trace.steps[:1]) == Counter()
    assert events(PREEMPT, trace.steps)["preempt"] == 1
