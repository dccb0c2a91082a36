"""What two engines must agree on, level by level, and where they first differ.

* `tokens`: `num_scheduled_tokens`, values and order, and the drafts
  scheduled with them (`scheduled_spec_decode_tokens`): both are the grant.
* `lifecycle`: also what `reset_prefix_cache` answered (`controls`), the new, resumed, preempted and finished ids, the queue
  orders, the free-block count, each live request's status,
  num_computed_tokens and num_tokens, and how finished requests ended.
* `blocks`: also the block ids handed to the model runner, and the
  num_computed_tokens each output record carries.

Each level includes the ones before it. The fields are listed in the order a
reader wants them reported: the first differing field of a step is the one
closest to the cause.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ...spec.trace import StepRecord

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
    if r.controls:  # what reset_prefix_cache answered (the loop makes the same calls for both engines)
        yield "controls", [c.to_json() for c in r.controls]
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
