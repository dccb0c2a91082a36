"""The fake model runner and the drafter of `spec.engine`, as tensor rules for the batched runner.

Fake model (`spec.engine.fake_model`): a scheduled request whose C, after
the advance, is still short of T is in a partial prefill chunk and samples
nothing. Otherwise the model samples at output index `C - drafts - prompt`
(one step ahead under async scheduling), where the truth is the planted
token, or the workload's filler once they run out. Scheduled drafts are
verified: each one equal to the truth at its position is accepted and the
model samples on; the first mismatch ends the run, so `accepted + 1` tokens
come back. Placeholder drafts (-1) never match.

Drafter (`spec.engine.Drafter`, sync spec decode): after a step, every
scheduled request that sampled and is still running consumes its next
proposal `(num_drafts, num_accepted)`; the drafts are the truth at the next
output positions, the ones past `num_accepted` off by one.
"""

from __future__ import annotations

import torch

from .state import RUNNING, BatchState

Tensor = torch.Tensor


def truth(st: BatchState, index: Tensor) -> Tensor:
    """The planted sample at output index `index` [B, R, X] (the filler past the planted ones)."""
    filler = st.filler[:, None, None].expand_as(index)
    if st.planted.shape[2] == 0:
        return filler
    planted = st.planted.gather(2, index.clamp(min=0, max=st.planted.shape[2] - 1))
    return torch.where(index < st.plen[..., None], planted, filler)


def fake_model(
    st: BatchState, n_sched: Tensor, n_spec: Tensor | None = None, spec_vals: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """(tokens [B, R, 1 + k], count [B, R]) for the step just scheduled (count 0: nothing sampled)."""
    sampled = (n_sched > 0) & (st.C >= st.num_tokens())
    if spec_vals is None or n_spec is None or spec_vals.shape[2] == 0:  # no drafts: one token at index C - prompt
        return truth(st, (st.C - st.prompt_len)[..., None]), sampled.long()
    K = spec_vals.shape[2]
    index = st.C - n_spec - st.prompt_len
    steps = torch.arange(K + 1, device=st.device)
    tokens = truth(st, index[..., None] + steps)
    j = steps[:K]
    mismatch = (j >= n_spec[..., None]) | (spec_vals != tokens[..., :K])
    first = torch.where(mismatch, j, torch.full_like(j, K)).min(-1).values
    return tokens, torch.where(sampled, first + 1, torch.zeros_like(first))


def propose(st: BatchState, n_sched: Tensor, num_gen: Tensor) -> tuple[Tensor, Tensor]:
    """The drafter after a sync step: (drafts [B, R, k], count [B, R]); count 0: no drafts proposed.

    Each request that sampled in the step and is still running consumes one proposal.
    """
    eligible = (n_sched > 0) & (num_gen > 0) & (st.status == RUNNING) & (st.k[:, None] > 0) & ~st.async_[:, None]
    P = st.prop_nd.shape[2]
    if P:
        at = st.nprop.clamp(max=P - 1)[..., None]
        inside = st.nprop < P
        nd = torch.where(inside, st.prop_nd.gather(2, at).squeeze(2), 0)
        na = torch.where(inside, st.prop_na.gather(2, at).squeeze(2), 0)
    else:
        nd = na = torch.zeros_like(st.nprop)
    st.nprop = st.nprop + eligible.long()
    count = torch.where(eligible, nd, torch.zeros_like(nd))
    j = torch.arange(st.kmax, device=st.device)
    drafts = truth(st, st.num_out[..., None] + j) + (j >= na[..., None]).long()
    return drafts, count


def update_draft_token_ids(st: BatchState, drafts: Tensor, count: Tensor) -> None:
    """vllm/v1/core/sched/scheduler.py:Scheduler.update_draft_token_ids for the requests with drafts (`count` > 0)
    that are still live: a prefill chunk drops them (T39), the others take them as spec_token_ids."""
    give = (count > 0) & st.live_mask()
    st.nspec = torch.where(give, torch.where(st.chunk, 0, count), st.nspec)
    st.spec_tok = torch.where(give[..., None], drafts, st.spec_tok)
