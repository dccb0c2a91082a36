"""`update_from_output` with the stop checks, and aborts, for B instances.

vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output: every scheduled request that
sampled a token appends it and runs `check_stop` (vllm/v1/core/sched/utils.py:check_stop), in this
order (§9.A.11):

1. EOS: the effective `eos_token_id`, None under `ignore_eos` (`has_eos`);
2. a stop token, which still applies under `ignore_eos`;
3. the length caps, `T >= max_model_len` or `outputs >= max_tokens`;
4. `min_tokens` only gates repetition detection, which is not configured,
   so it never decides anything here (T32, T33).

Before 0.29.0 `min_tokens` came first: below it no stop applied, not EOS,
not a stop token, not the length caps (`min-tokens-gates-every-stop`,
`spec.rules.stop_kind`), per instance by its release column; a batch
whose every instance is 0.29.0 or later skips the gate.

EOS and stop tokens finish as FINISHED_STOPPED, the caps as
FINISHED_LENGTH_CAPPED. The stopped are freed in `num_scheduled_tokens`
order (the order of the loop at
vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output (2313)), each
prepending its reversed table, and their ids are reported by the next
`schedule()`. Outputs survive preemption, so the output count is never reset.

Aborts (vllm/v1/core/sched/scheduler.py:Scheduler.finish_requests) are applied one id at a time in the
order given, like the engine loop does: a request not yet added or already
finished is left alone, and an id named twice is finished once.

Structured output: the failed grammars the last pass reached (`grammar.py`)
finish as FINISHED_ERROR at the end of the update
(vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output), with no output
and no blocks to free.

Spec decode and async scheduling (§5, §6). A step may return several tokens per
request (accepted drafts + 1): rejected drafts roll C and P back, each
token is appended and checked in turn (a loop over token positions, at most
1 + k), and a stop trims the rest and keeps C one short of T. Output of a
request preempted while it was in flight is stale: it is appended, touches
neither C nor P, and may finish the PREEMPTED request. Under async or spec
decode (before 0.33.0, async only: `rules.caches_on_update`) the full
blocks among the processed tokens (C - in flight) are registered in the
prefix cache before a stopped request is freed.
"""

from __future__ import annotations

import torch

from . import rules
from .block_pool import push_free
from .prefix_cache import append_token, register
from .state import (
    BIG,
    FINISHED_ABORTED,
    FINISHED_ERROR,
    FINISHED_LENGTH_CAPPED,
    FINISHED_STOPPED,
    RUNNING,
    BatchState,
)

Tensor = torch.Tensor


def update_from_output(
    st: BatchState,
    n_sched: Tensor,
    sched_key: Tensor,
    n_spec: Tensor,
    gen: Tensor,
    num_gen: Tensor,
    updating: Tensor | None = None,
    pooled: Tensor | None = None,
) -> Tensor:
    """Absorb one step's output: `gen` [B, R, G] sampled tokens, `num_gen` [B, R] how many (0: none).
    `n_sched`, `sched_key`, `n_spec` are that step's grants, order and scheduled drafts; `updating` [B] the
    instances that call update_from_output in this step (default all: an async one that absorbs nothing does
    not, so its failed grammars wait); `pooled` [B, R] the requests whose pooled output came back (a pooling
    model). Returns the mask of requests that stopped."""
    sched = n_sched > 0
    # An aborted request's output is ignored: aborted while in flight (a batch queue), or after the model ran and
    # before this update (EngineCore's aborts queue, `Abort.mid_step`), synchronous steps too.
    live = sched & st.live_mask()
    g = torch.where(live, num_gen, torch.zeros_like(num_gen))
    fresh = live  # in a synchronous step nothing is stale
    if st.any_queue:  # tokens in flight: async scheduling or pipeline parallel
        st.inflight = torch.where(live, st.inflight - n_sched, st.inflight)
        stale = live & (st.stale > 0)
        st.stale = torch.where(stale, st.stale - n_sched, st.stale)
        fresh = live & ~stale
        # A cache reset's victim drops its stale output whole (Scheduler.update_from_output, `drop_stale_output`).
        g = torch.where(stale & st.drop, torch.zeros_like(g), g)
    if st.any_spec:
        rejected = torch.where(live & (n_spec > 0) & (g > 0), rules.num_rejected_drafts(n_spec, g), 0)
        st.C = torch.where(fresh & (st.C > 0), st.C - rejected, st.C)
        st.P = torch.where(fresh & (st.P > 0), st.P - rejected, st.P)
    if st.keyed:
        was_running = st.status == RUNNING
        had_placeholders = st.P > 0
    stopped = torch.zeros_like(sched)
    stop_kind = torch.zeros_like(sched)  # True: EOS or stop token; False: a length cap
    G = gen.shape[2]
    gated = "min-tokens-gates-every-stop" in st.older  # some instance's release holds back every stop
    for j in range(G):
        act = (j < g) & ~stopped if j else g > 0
        if j > 0 and not bool(act.any()):
            break
        token = gen[..., j]
        st.num_out = st.num_out + act.long()
        if st.keyed:
            append_token(st, act, token)
        eos = act & st.has_eos & (token == st.eos)
        # With no stop tokens anywhere only EOS can stop a request early, so `stop` may alias `eos`.
        stop = act & ((st.stop_tok == token[..., None]) & st.stop_valid).any(-1) if st.stop_tok.shape[2] else eos
        length = act & ((st.num_tokens() >= st.L[:, None]) | (st.num_out >= st.max_tokens))
        if gated:  # before 0.29.0, below min_tokens no stop applies, EOS, stop tokens and caps alike
            held = (st.num_out < st.min_tokens) & ~st.min_tokens_gates_every_stop[:, None]
            eos, stop, length = eos & ~held, stop & ~held, length & ~held
        now = eos | stop | length
        if G > 1:  # computed covers all but the last kept token
            st.C = torch.where(now & fresh, st.C - (g - 1 - j), st.C)
        stop_kind = stop_kind | (now & (eos | stop))
        stopped = stopped | now
    if pooled is not None:  # a pooling model stops on its pooled output, stale or not (unless dropped)
        pool_stop = live & pooled & ~stopped
        if st.any_queue:
            pool_stop = pool_stop & ~(stale & st.drop)
        stop_kind = stop_kind | pool_stop
        stopped = stopped | pool_stop
    if st.any_async:
        st.P = torch.where(fresh & (st.P > 0), st.P - g, st.P)  # every returned token, trimmed ones too
    if st.keyed:
        on_update = rules.caches_on_update(
            had_placeholders, st.k[:, None], st.sync_spec_decode_caches_on_update[:, None]
        )
        cache = fresh & was_running & (g > 0) & on_update
        order = torch.where(sched, sched_key, torch.full_like(sched_key, BIG)).sort(dim=1).indices
        register(st, order, (st.C - st.inflight).gather(1, order), cache.gather(1, order))
    if bool(stopped.any()):  # one read-back; most decode steps finish nobody
        status = torch.where(stop_kind, FINISHED_STOPPED, FINISHED_LENGTH_CAPPED)
        st.status = torch.where(stopped, status, st.status)
        order = torch.where(stopped, sched_key, torch.full_like(sched_key, BIG)).sort(dim=1).indices
        push_free(st, order, stopped.gather(1, order))
        st.fin_pending = st.fin_pending | stopped
    if st.any_grammar:  # the failed grammars the last pass reached: finished here, holding no blocks
        errors = st.grammar_error & st.live_mask()
        if updating is not None:
            errors = errors & updating[:, None]
        st.grammar_error = st.grammar_error & ~errors
        st.status = torch.where(errors, FINISHED_ERROR, st.status)
        st.fin_pending = st.fin_pending | errors
        stopped = stopped | errors
    return stopped


def abort(st: BatchState, slots: Tensor, valid: Tensor, status: int = FINISHED_ABORTED) -> Tensor:
    """Abort the listed slots [B, N] in list order (or finish them from outside with another finished `status`);
    return which entries finished a live request [B, N]."""
    N = slots.shape[1]
    dup = torch.zeros_like(valid)
    if N > 1:  # an id named twice in one step is finished once (vLLM takes a set; later calls find it finished)
        same = (slots[:, :, None] == slots[:, None, :]) & valid[:, :, None] & valid[:, None, :]
        earlier = torch.ones(N, N, dtype=torch.bool, device=slots.device).tril(-1)
        dup = (same & earlier).any(2)
    live = st.live_mask().gather(1, slots)
    hit = valid & live & ~dup
    push_free(st, slots, hit)
    bi, ji = hit.nonzero(as_tuple=True)
    st.status[bi, slots[bi, ji]] = status
    st.fin_pending[bi, slots[bi, ji]] = True
    return hit
