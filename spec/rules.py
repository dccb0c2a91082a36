"""The rules that the reference, the monitors, the Z3 encoding and the torch engine all need, each written once.

`reference_impl/rules.py` holds the arithmetic rules that only the reference
and `proofs/` use. The rules here are needed by more users than that, and
the import rules decide where they can live: the monitors (`spec/invariants`)
may import nothing outside `spec/`, and the torch engine may import `spec/`
but never the reference. So `spec/` is the only layer every user can import.

* `victim_key`: which running request PRIORITY preempts. The reference
  maximises it, Z3 compares it (`proofs/encoding.py`), the monitor
  `priority-victim-is-least-important` checks that the victims maximise it.
* `heap_key`: the PRIORITY waiting queue's order. The reference's queue
  sorts by it, the trace replay orders arrivals by it, Z3 orders the waiting
  slots by it, and the torch engine ranks requests by it when it loads them.
* `preempted_counters`: what `_preempt_request` leaves in a victim's
  counters. The reference stores them field by field, in vLLM's order, and Z3
  applies them to the victim's slot.
* `num_owed_tokens`: the seed formula. `spec.state.RequestProperties` (the
  derived properties of the frozen state and of the reference's mutable
  request) computes it, and so do Z3 and the monitors.

Each is a plain function of ints and Z3 terms (`spec.arith`), so the Z3
encoding builds its formula from the same lines. The torch engine cannot run
them on tensors, so it keeps tensor twins (`gpu_impl/preemption.py`,
`gpu_impl/rules.py`), and `tests/unit/test_rule_twins.py` checks each twin
against its rule on random inputs. `docs/architecture.md` lists who uses each
rule.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .arith import and_, plus
from .request import RequestStatus

Int = Any  # an int or a Z3 ArithRef
Bool = Any  # a bool or a Z3 BoolRef


def victim_key(priority: Int, arrival_time: Any) -> tuple[Int, Any]:
    """vllm/v1/core/sched/scheduler.py:Scheduler.schedule (932-936): PRIORITY preempts
    `max(running, key=(priority, arrival_time))`.

    The largest key is the least important request: the highest priority
    value, and among those the latest arrival. The request id is not part of
    the key, unlike the heap's, so on an exact tie Python's `max` takes the
    first in running order. Compare keys with `spec.arith.lex_gt` / `lex_ge`,
    which work on Z3 terms too.
    """
    return (priority, arrival_time)


def heap_key(priority: Int, arrival_time: Any, request_id: Any) -> tuple[Int, Any, Any]:
    """vllm/v1/request.py:Request.__lt__ (357-367): the PRIORITY waiting heap pops the smallest key first.

    The last tie-break, `id()`, never decides between distinct request ids.
    The Z3 encoding passes the rank of the id for `request_id` (the rank keeps
    its order).
    """
    return (priority, arrival_time, request_id)


class PreemptedCounters(NamedTuple):
    """A victim's counters after `_preempt_request`, named as `spec.state.RequestState` names them."""

    status: RequestStatus
    num_computed_tokens: Int
    num_blocks: Int
    num_spec_tokens: Int
    num_output_placeholders: Int
    num_stale_output_tokens: Int
    drop_stale_output: Bool
    num_preemptions: Int


def preempted_counters(
    num_in_flight_tokens: Int, num_stale_output_tokens: Int, drop_stale_output: Bool, num_preemptions: Int
) -> PreemptedCounters:
    """Preemption by recompute: vllm/v1/core/sched/scheduler.py:Scheduler._preempt_request (1812-1842).

    The victim keeps its tokens and loses everything computed from them: C,
    every block, the drafts and the output placeholders go to 0, so it is
    recomputed from scratch when it is admitted again. Output still in flight
    becomes stale. It is still delivered, but it may no longer move the reset
    counters. A drop-mode share that has not drained stays dropped. Where the
    victim goes (the head of the FCFS deque, or into the PRIORITY heap) is the
    queue's `prepend_request`, not a counter. The caller frees the blocks and
    requeues the request.

    Only the arguments a counter's new value depends on are passed. The
    encoding tracks "is anything in flight" as a Bool and passes that for
    `num_in_flight_tokens`: stale takes it over unchanged, so the abstraction
    commutes with the rule.
    """
    return PreemptedCounters(
        status=RequestStatus.PREEMPTED,
        num_computed_tokens=0,
        num_blocks=0,
        num_spec_tokens=0,
        num_output_placeholders=0,
        num_stale_output_tokens=num_in_flight_tokens,
        drop_stale_output=and_(drop_stale_output, num_stale_output_tokens > 0),
        num_preemptions=num_preemptions + 1,
    )


def num_owed_tokens(num_tokens_with_spec: Int, num_output_placeholders: Int, num_computed_tokens: Int) -> Int:
    """What a request is owed before any clamp: vllm/v1/core/sched/scheduler.py:Scheduler.schedule (839-843).

    `num_tokens_with_spec + num_output_placeholders - num_computed_tokens`.
    Under async scheduling the placeholders count tokens a step in flight will
    return, so a decode that has caught up is still owed one. A literal 0 for
    the placeholders adds no term, so the core Z3 formula has no trace of
    async scheduling.
    """
    return plus(num_tokens_with_spec, num_output_placeholders) - num_computed_tokens
