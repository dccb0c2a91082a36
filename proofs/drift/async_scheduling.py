"""No drift under async scheduling: the encoding takes the reference's engine step, queue of 2 and all.

The reference runs `spec.engine.steps`, whose async loop is vLLM's
`step_with_batch_queue` (schedule while the queue has room, else absorb the
older step), with the fake model (`drift_features.recorded_steps`). At each engine step the pre-state is the state schedule()
starts from, and the step in flight is the queue's one entry; from it come
each slot's record (tokens, drafts, and the placeholders it added: 0 when
the model returned nothing, a prefill chunk, else 1 + drafts) and what its
model returned (accepted count, stop position), the encoding's free inputs.
The encoding is evaluated on ints and compared through the abstraction:
the core fields, the drafts, P after the step, the new step's record, and
`record_holds` of the pre-state, the assumption the feature run makes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from ...spec.state import SchedulerState
from ..encoding.async_scheduling import record_holds
from ..encoding.step import step
from .features import encoding_pre, feature_diffs, recorded_steps


def async_steps(workload, max_steps: int = 60, max_live: int = 10) -> Iterator[dict[str, Any]]:
    """Each engine step that schedules from a state of 1..max_live live requests, with what it absorbed."""
    for pre, absorbed, record, post, probed in recorded_steps(workload, max_steps, max_live):
        yield dict(
            pre=pre, in_flight=absorbed, output=record.output, post=post, finished=record.finished, probed=probed
        )


def compare_async(
    pre: SchedulerState, in_flight, output, post: SchedulerState, finished, probed
) -> list[tuple[str, Any, Any]]:
    """(field, encoding's value, reference's value) for every disagreement of one async engine step."""
    old_output, old_model_output = in_flight
    enc_pre, order, inputs = encoding_pre(pre, dict(old_model_output.sampled_token_ids), {}, probed)
    enc_pre.config.async_scheduling = True
    k = pre.config.num_speculative_tokens
    for rid in order:
        n1 = old_output.num_scheduled_tokens.get(rid, 0)
        d1 = len(old_output.scheduled_spec_decode_tokens.get(rid, ()))
        inputs[rid].update(
            num_output_placeholders=pre.requests[rid].num_output_placeholders,
            in_flight=n1 > 0,
            in_flight_num_scheduled=n1,
            in_flight_num_drafts=d1,
            in_flight_placeholders=1 + d1 if old_model_output.sampled_token_ids.get(rid) else 0,
        )
    enc_pre.slots = [replace(s, **inputs[rid]) for s, rid in zip(enc_pre.slots, order)]
    enc = step(enc_pre)
    diffs = feature_diffs(enc, order, output, post, finished)

    def same(field: str, a: Any, b: Any) -> None:
        if a != b:
            diffs.append((field, a, b))

    for j, (rid, s) in enumerate(zip(order, enc_pre.slots)):
        same(
            f"{rid}.pre record",
            record_holds(
                j < enc_pre.num_running,
                s.num_computed_tokens,
                s.num_output_placeholders,
                s.in_flight,
                s.in_flight_num_scheduled,
                s.in_flight_num_drafts,
                s.in_flight_placeholders,
                k,
            ),
            True,
        )
        live = post.requests.get(rid)
        if live is not None:
            same(f"{rid}.num_output_placeholders", enc.num_output_placeholders[j], live.num_output_placeholders)
            same(
                f"{rid}.in_flight tokens",
                enc.in_flight_num_scheduled[j] if enc.in_flight[j] else 0,
                live.num_in_flight_tokens,
            )
            same(f"{rid}.stale", 0, live.num_stale_output_tokens)
    return diffs
