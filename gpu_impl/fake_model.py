"""The fake model runner of `spec.engine.fake_model`, as a tensor rule.

A scheduled request whose C, after the advance, is still short of T is in
a partial prefill chunk (vLLM's `is_prefill_chunk`) and samples nothing.
Otherwise it samples its next planted token: index = outputs so far (which
survive preemption, so a recomputed request continues where it stopped),
and the workload's filler token once the planted ones run out.
"""

from __future__ import annotations

import torch

from .state import BatchState

Tensor = torch.Tensor


def fake_model(st: BatchState, n_sched: Tensor) -> tuple[Tensor, Tensor]:
    """(token, sampled) [B, R] for the step just scheduled."""
    sampled = (n_sched > 0) & (st.C >= st.num_tokens())
    filler = st.filler[:, None].expand_as(st.num_out)
    if st.planted.shape[2] == 0:
        return filler, sampled
    index = st.num_out.clamp(max=st.planted.shape[2] - 1)
    planted = st.planted.gather(2, index[..., None]).squeeze(2)
    return torch.where(st.num_out < st.plen, planted, filler), sampled
