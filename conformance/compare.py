"""What two engines must agree on, level by level, and where they first differ.

* `tokens`: `num_scheduled_tokens`, values and order, and the drafts
  scheduled with them (`scheduled_spec_decode_tokens`): both are the grant.
* `lifecycle`: also the new, resumed, preempted and finished ids, the queue
  orders, the free-block count, each live request's status,
  num_computed_tokens and num_tokens, and how finished requests ended.
* `blocks`: also the block ids handed to the model runner, and the
  num_computed_tokens each output record carries.

Each level includes the ones before it. The fields are listed in the order a
reader wants them reported: the first differing field of a step is the one
closest to the cause.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..spec.trace import StepRecord

if TYPE_CHECKING:
    from .differ import Divergence

LEVELS = ("tokens", "lifecycle", "blocks")


@dataclass(frozen=True)
class Difference:
    field: str
    a: Any
    b: Any


def _tokens(r: StepRecord) -> Iterator[tuple[str, Any]]:
    yield "output.num_scheduled_tokens", list(r.output.num_scheduled_tokens.items())
    yield (
        "output.scheduled_spec_decode_tokens",
        sorted((k, list(v)) for k, v in r.output.scheduled_spec_decode_tokens.items()),
    )


def _lifecycle(r: StepRecord) -> Iterator[tuple[str, Any]]:
    o, s = r.output, r.state
    yield "output.preempted_req_ids", sorted(o.preempted_req_ids)
    yield "output.scheduled_new_reqs (new)", [n.req_id for n in o.scheduled_new_reqs if not n.resumed]
    yield "output.scheduled_new_reqs (resumed)", [n.req_id for n in o.scheduled_new_reqs if n.resumed]
    yield "output.finished_req_ids", sorted(o.finished_req_ids)
    yield "state.running", list(s.running)
    yield "state.waiting", list(s.waiting)
    yield "state.num_free_blocks", s.num_free_blocks
    yield "state.requests (ids)", sorted(s.requests)
    for rid in sorted(s.requests):
        q = s.requests[rid]
        yield f"state.requests[{rid}].status", q.status.name
        yield f"state.requests[{rid}].num_computed_tokens", q.num_computed_tokens
        yield f"state.requests[{rid}].num_tokens", q.num_tokens
    yield "finished (ids)", sorted(r.finished)
    for rid in sorted(r.finished):
        yield f"finished[{rid}].status", r.finished[rid].status.name
        yield f"finished[{rid}].output_token_ids", list(r.finished[rid].output_token_ids)


def _blocks(r: StepRecord) -> Iterator[tuple[str, Any]]:
    for n in r.output.scheduled_new_reqs:
        yield f"output.scheduled_new_reqs[{n.req_id}].block_ids", list(n.block_ids)
        yield f"output.scheduled_new_reqs[{n.req_id}].num_computed_tokens", n.num_computed_tokens
    for c in r.output.scheduled_cached_reqs:
        yield (
            f"output.scheduled_cached_reqs[{c.req_id}].new_block_ids",
            None if c.new_block_ids is None else list(c.new_block_ids),
        )
        yield f"output.scheduled_cached_reqs[{c.req_id}].num_computed_tokens", c.num_computed_tokens


_FIELDS: dict[str, list[Callable[[StepRecord], Iterator[tuple[str, Any]]]]] = {
    "tokens": [_tokens],
    "lifecycle": [_tokens, _lifecycle],
    "blocks": [_tokens, _lifecycle, _blocks],
}


def observables(record: StepRecord, level: str) -> list[tuple[str, Any]]:
    return [kv for fields in _FIELDS[level] for kv in fields(record)]


def first_difference(a: StepRecord, b: StepRecord, level: str) -> Difference | None:
    """The first field, in report order, where the two records differ at `level`."""
    fa, fb = observables(a, level), observables(b, level)
    for (name_a, va), (name_b, vb) in zip(fa, fb):
        if name_a != name_b:  # the field lists themselves differ: report the structural difference
            return Difference(name_a if name_a < name_b else name_b, name_a, name_b)
        if va != vb:
            return Difference(name_a, va, vb)
    if len(fa) != len(fb):
        extra = (fa if len(fa) > len(fb) else fb)[min(len(fa), len(fb))]
        return Difference(
            extra[0], extra[1] if len(fa) > len(fb) else "<absent>", extra[1] if len(fb) > len(fa) else "<absent>"
        )
    return None


def compare_records(a: Sequence[StepRecord], b: Sequence[StepRecord], level: str) -> tuple[Divergence | None, int]:
    """The lock-step differ's verdict on two finished traces: first divergence and steps compared.

    Used where the two runs did not happen side by side: a batch of torch
    instances against the oracle, or an engine's second run against its first.
    """
    from .differ import Divergence

    before = None
    for step in range(max(len(a), len(b))):
        ra = a[step] if step < len(a) else None
        rb = b[step] if step < len(b) else None
        if ra is None or rb is None:
            return Divergence(
                step,
                "trace length",
                "ended" if ra is None else "continues",
                "ended" if rb is None else "continues",
                before,
                (ra, rb),
            ), step
        try:
            d = first_difference(ra, rb, level)
        except Exception as e:  # noqa: BLE001 - a record that cannot be read is malformed, as in differ.diff
            return Divergence(step, "malformed step record", None, f"{type(e).__name__}: {e}", before, (ra, rb)), step
        if d is None and ra.model_output != rb.model_output:
            # In lock-step the harness's fake model answers both engines; in a batch the engine's own
            # tensor version of it does, so its answers are part of what must agree.
            d = Difference("model_output", ra.model_output.to_json(), rb.model_output.to_json())
        if d is not None:
            return Divergence(step, d.field, d.a, d.b, before, (ra, rb)), step + 1
        before = ra.state
    return None, len(a)
