"""The update of one step: `_update_after_schedule`, then `update_from_output` with the fake model's output.

vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output, per slot: a request that completes its prefill
(or decodes) samples; the tokens it appends are checked for a stop (`rules.stop_kind`), and a finished
request frees its blocks. Under spec decode the sampled tokens are `spec_decode.sample`'s; under async
scheduling the output is the older step's, absorbed after the AsyncScheduler increment
(`async_scheduling.after_schedule`). The queue positions after the step are counts of who precedes whom.
"""

from __future__ import annotations

from typing import Any

from ...reference_impl import rules
from ...spec.arith import and_, ite, not_, or_
from ...spec.versions import holds
from .async_scheduling import after_schedule
from .order import count
from .prefix_caching import release
from .spec_decode import sample
from .state import Bool, Int, Post, Pre, StepState


def update_from_output(pre: Pre, st: StepState) -> Post:
    """The step's output and the state after the update, from the state the two passes left."""
    N = len(pre.slots)
    post = Post(admitted=st.admitted, preempted=st.preempted, assume=st.assume)
    for j in range(N):
        update_slot(pre, st, post, j)
    run_order = [ite(st.admitted[j], N + st.adm_pos[j], j) for j in range(N)]
    post.run_pos = [
        ite(post.running[j], count([and_(post.running[k], run_order[k] < run_order[j]) for k in range(N)]), -1)
        for j in range(N)
    ]
    post.wait_pos = [
        ite(post.waiting[j], count([and_(post.waiting[k], st.wpos[k] < st.wpos[j]) for k in range(N)]), -1)
        for j in range(N)
    ]
    post.num_free_blocks = st.free
    post.num_shared_refs = st.shared
    post.inputs += st.inputs
    return post


def update_slot(pre: Pre, st: StepState, post: Post, j: int) -> None:
    """Slot j: its tokens computed, what it samples, whether it stops, and its blocks; appended to `post`."""
    c, s = pre.config, pre.slots[j]
    st.C[j] = st.C[j] + ite(st.sched[j], st.n[j], 0)
    sampled = and_(st.sched[j], st.C[j] >= s.num_tokens)  # not a partial prefill chunk
    T, done, kind, stop_seen = _sample(pre, st, post, j, sampled)
    if c.prefix_caching:  # a request preempted in this step holds nothing, and released its blocks then
        gone = and_(done, not_(st.preempted[j])) if c.async_scheduling else done
        st.free, st.shared = release(st.free, st.shared, gone, st.blocks[j], s.shared_freed, st.inputs)
        post.num_hit_tokens.append(s.hit_blocks * c.block_size)
    else:
        st.free = st.free + ite(done, st.blocks[j], 0)
    post.scheduled.append(st.sched[j])
    post.num_scheduled.append(ite(st.sched[j], st.n[j], 0))
    post.finished.append(done)
    # Before 0.29.0 a stop token below min_tokens is no stop (`min-tokens-gates-every-stop`): the stop token is
    # the 1st appended token in the core step, the `stop_at`-th under spec decode and async.
    gated = not holds("min-tokens-gates-every-stop", c.release)
    at = 1 if stop_seen is None else s.stop_at
    seen = and_(sampled, or_(s.samples_eos, s.samples_stop)) if stop_seen is None else stop_seen
    post.sampled_stop.append(and_(seen, s.num_output_tokens + at >= s.min_tokens) if gated else seen)
    post.finished_stopped.append(and_(done, kind == rules.STOPPED))
    post.running.append(and_(st.in_run[j], not_(done)))
    post.waiting.append(and_(st.in_wait[j], not_(done)))
    post.num_computed_tokens.append(st.C[j])
    post.num_tokens.append(T)
    post.num_blocks.append(ite(done, 0, st.blocks[j]))


def _sample(pre: Pre, st: StepState, post: Post, j: int, sampled: Bool) -> tuple[Int, Bool, Int, Bool | None]:
    """Slot j's output: (its tokens after it, finished, the stop verdict, a stop token among those appended).

    Sets its C, and appends what the features add to `post`. The last is None in the core scope, where the one
    sampled token is the EOS or a stop token, or not (`samples_eos`, `samples_stop`).
    """
    c, s = pre.config, pre.slots[j]
    L, k = c.max_model_len, c.num_speculative_tokens
    got: dict[str, Any]
    if c.async_scheduling:  # the AsyncScheduler increment, then the older step's output (async_scheduling.py)
        got = after_schedule(
            s,
            st.C[j],
            st.P[j],
            st.S[j],
            st.sched[j],
            st.n[j],
            st.drafts[j],
            st.stale[j],
            L,
            k,
            c.spec_decode,
            c.release,
        )
        post.inputs += got["inputs"]
        post.num_scheduled_spec.append(st.drafts[j])
        post.num_spec_tokens.append(got["S"])
        post.num_output_placeholders.append(got["P"])
        for f in ("in_flight", "in_flight_num_scheduled", "in_flight_num_drafts", "in_flight_placeholders"):
            getattr(post, f).append(got[f])
    elif c.spec_decode:
        got = sample(s, st.C[j], st.drafts[j], sampled, L, k, c.release)
        post.inputs += got["inputs"]
        post.num_scheduled_spec.append(st.drafts[j])
        # update_draft_token_ids: a new proposal for who sampled and runs; a scheduled request's were consumed
        post.num_spec_tokens.append(
            ite(and_(sampled, st.in_run[j], not_(got["done"])), s.num_new_drafts, ite(st.sched[j], 0, st.S[j]))
        )
    else:
        T = s.num_tokens + ite(sampled, 1, 0)
        kind = rules.stop_kind(
            s.samples_eos,
            s.samples_stop,
            T,
            s.num_output_tokens + ite(sampled, 1, 0),
            L,
            s.max_tokens,
            s.min_tokens,
            c.release,
        )
        return T, and_(sampled, kind != rules.NOT_STOPPED), kind, None
    st.C[j] = got["C"]
    return got["T"], got["done"], got["kind"], got["stop_seen"]
