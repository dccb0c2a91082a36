"""`update_from_output` with the stop checks, and aborts, for B instances.

update_from_output (scheduler.py:2259-2676): every scheduled request that
sampled a token appends it and runs `check_stop` (utils.py:98-140), in this
order (§9.A.11):

1. EOS: the effective `eos_token_id`, None under `ignore_eos` (`has_eos`);
2. a stop token, which still applies under `ignore_eos`;
3. the length caps, `T >= max_model_len` or `outputs >= max_tokens`;
4. `min_tokens` only gates repetition detection, which is not configured,
   so it never decides anything here (T32, T33).

EOS and stop tokens finish as FINISHED_STOPPED, the caps as
FINISHED_LENGTH_CAPPED. With one sampled token per step there is nothing
to trim. The stopped are freed in `num_scheduled_tokens` order (the order
of the loop at :2311), each prepending its reversed table, and their ids are
reported by the next `schedule()`. Outputs survive preemption, so the
output count is never reset.

Aborts (`finish_requests`, :2964-3029) are applied one id at a time in the
order given, like the engine loop does: a request not yet added or already
finished is left alone, and an id named twice is finished once.

Scope: no drafts are ever scheduled (nothing in the Engine protocol sets
them), no async placeholders, and no output is in flight at a preemption,
so the spec-decode rollback and the stale-output rules are inert.
"""

from __future__ import annotations

import torch

from .freequeue import push_free
from .state import BIG, FINISHED_ABORTED, FINISHED_LENGTH_CAPPED, FINISHED_STOPPED, BatchState

Tensor = torch.Tensor


def update_from_output(st: BatchState, sched_key: Tensor, token: Tensor, sampled: Tensor) -> Tensor:
    """Append `token` where `sampled` [B, R]; return the mask of requests that stopped."""
    st.num_out = st.num_out + sampled.long()
    eos = sampled & st.has_eos & (token == st.eos)
    # With no stop tokens anywhere only EOS can stop a request early, so `stop` may alias `eos`.
    stop = sampled & ((st.stop_tok == token[..., None]) & st.stop_valid).any(-1) if st.stop_tok.shape[2] else eos
    length = sampled & ((st.num_tokens() >= st.L[:, None]) | (st.num_out >= st.max_tokens))
    stopped = eos | stop | length
    if bool(stopped.any()):  # one read-back; most decode steps finish nobody
        status = torch.where(eos | stop, FINISHED_STOPPED, FINISHED_LENGTH_CAPPED)
        st.status = torch.where(stopped, status, st.status)
        order = torch.where(stopped, sched_key, torch.full_like(sched_key, BIG)).sort(dim=1).indices
        push_free(st, order, stopped.gather(1, order))
        st.fin_pending = st.fin_pending | stopped
    return stopped


def abort(st: BatchState, slots: Tensor, valid: Tensor) -> Tensor:
    """Abort the listed slots [B, N] in list order; return which entries finished a live request [B, N]."""
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
    st.status[bi, slots[bi, ji]] = FINISHED_ABORTED
    st.fin_pending[bi, slots[bi, ji]] = True
    return hit
