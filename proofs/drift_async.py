"""No drift under async scheduling: the encoding takes the reference's engine step, queue of 2 and all.

The reference runs vLLM's `step_with_batch_queue` loop as `spec/engine.py`
does (schedule while the queue has room, else absorb the older step), with
the fake model. At each engine step the pre-state is the state schedule()
starts from, and the step in flight is the queue's one entry; from it come
each slot's record (tokens, drafts, and the placeholders it added: 0 when
the model returned nothing, a prefill chunk, else 1 + drafts) and what its
model returned (accepted count, stop position), the encoding's free inputs.
The encoding is evaluated on ints and compared through the abstraction:
the core fields, the drafts, P after the step, the new step's record, and
`record_holds` of the pre-state, the assumption the feature run makes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any, Iterator

from ..reference_impl import ReferenceEngine
from ..spec.engine import ASYNC_BATCH_QUEUE_SIZE, fake_model
from ..spec.output import ModelRunnerOutput, SchedulerOutput
from ..spec.state import SchedulerState
from .drift import diff_through_abstraction, from_state
from .drift_features import model_inputs, probe_cache, shared_refs
from .encoding import step
from .encoding_async import record_holds


def async_steps(workload, max_steps: int = 60, max_live: int = 10) -> Iterator[dict[str, Any]]:
    """Each engine step that schedules from a state of 1..max_live live requests, with what it absorbed."""
    engine = ReferenceEngine(workload.config)
    probed = probe_cache(engine)
    batch_queue: deque[tuple[SchedulerOutput, ModelRunnerOutput]] = deque()
    unreported: set[str] = set()
    for k in range(min(workload.max_steps, max_steps)):
        for r in workload.arrivals_at(k):
            engine.add_request(r)
        for rid in workload.aborts_at(k):
            if engine.abort_request(rid) is not None:
                unreported.add(rid)
        pre, before = engine.state(), engine.summary()
        in_flight = batch_queue[-1] if batch_queue else (SchedulerOutput(), ModelRunnerOutput({}))
        probed.clear()
        if not (before.running or before.waiting or unreported):
            if batch_queue:
                unreported |= set(engine.update_from_output(*batch_queue.pop()))
            continue
        output, unreported = engine.schedule(), set()
        batch_queue.appendleft((output, fake_model(workload, output, engine.summary())))
        finished: dict = {}
        if len(batch_queue) >= ASYNC_BATCH_QUEUE_SIZE:  # full: absorb the older step (with live requests, else room)
            finished = engine.update_from_output(*batch_queue.pop())
            unreported |= set(finished)
        if len(pre.requests) <= max_live:
            yield dict(pre=pre, in_flight=in_flight, output=output, post=engine.state(), finished=finished,
                       probed={r: dict(v) for r, v in probed.items()})


def compare_async(pre: SchedulerState, in_flight, output, post: SchedulerState, finished, probed) -> list[tuple[str, Any, Any]]:
    """(field, encoding's value, reference's value) for every disagreement of one async engine step."""
    enc_pre, order = from_state(pre, {})
    c, k = pre.config, pre.config.num_speculative_tokens
    enc_pre.config.spec_decode, enc_pre.config.num_speculative_tokens = k > 0, k
    enc_pre.config.async_scheduling = True
    old_output, old_model_output = in_flight
    inputs = model_inputs(pre, dict(old_model_output.sampled_token_ids), {})
    if c.enable_prefix_caching:
        enc_pre.config.prefix_caching, enc_pre.num_shared_refs = True, shared_refs(pre)
        for rid in order:
            inputs[rid].update(dict(hit_blocks=0, evictable=0, shared_freed=0), **probed.get(rid, {}))
    for rid in order:
        n1 = old_output.num_scheduled_tokens.get(rid, 0)
        d1 = len(old_output.scheduled_spec_decode_tokens.get(rid, ()))
        inputs[rid].update(num_output_placeholders=pre.requests[rid].num_output_placeholders, in_flight=n1 > 0,
                           in_flight_num_scheduled=n1, in_flight_num_drafts=d1,
                           in_flight_placeholders=1 + d1 if old_model_output.sampled_token_ids.get(rid) else 0)
    enc_pre.slots = [replace(s, **inputs[rid]) for s, rid in zip(enc_pre.slots, order)]
    enc = step(enc_pre)
    diffs = diff_through_abstraction(enc, order, output, post, finished, k > 0)

    def same(field: str, a: Any, b: Any) -> None:
        if a != b:
            diffs.append((field, a, b))

    if not all(enc.inputs):
        diffs.append(("inputs within bounds", False, True))
    if c.enable_prefix_caching:
        same("num_shared_refs", enc.num_shared_refs, shared_refs(post))
    for j, (rid, s) in enumerate(zip(order, enc_pre.slots)):
        same(f"{rid}.pre record", record_holds(j < enc_pre.num_running, s.num_computed_tokens, s.num_output_placeholders,
                                               s.in_flight, s.in_flight_num_scheduled, s.in_flight_num_drafts,
                                               s.in_flight_placeholders, k), True)
        live = post.requests.get(rid)
        if live is None:
            same(f"{rid}.finished_stopped", enc.finished_stopped[j], finished[rid].status.name == "FINISHED_STOPPED")
            continue
        same(f"{rid}.num_output_placeholders", enc.num_output_placeholders[j], live.num_output_placeholders)
        same(f"{rid}.in_flight tokens", enc.in_flight_num_scheduled[j] if enc.in_flight[j] else 0, live.num_in_flight_tokens)
        same(f"{rid}.stale", 0, live.num_stale_output_tokens)
    return diffs
