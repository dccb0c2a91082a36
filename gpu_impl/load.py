"""Putting requests into slots: the static per-request fields, written in bulk.

Python glue, run when requests are added, never per step. It turns each
`Request` into the columns the step reads: prompt length, `max_tokens`,
`min_tokens` (read only before 0.29.0), the effective EOS (None under
`ignore_eos`, `spec/request.py`), the stop tokens, priority and arrival
time, and, for the batched runner, the arrival step and the fake model's
planted tokens. Everything is built on the host and moved
to the device in one copy per column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..spec.block_hash import chain_seed
from ..spec.request import Request
from ..spec.rules import heap_key
from .prefix_cache import prompt_hashes
from .state import GRAMMAR_COMPILING, NO_GRAMMAR, BatchState


@dataclass(frozen=True)
class Entry:
    instance: int
    slot: int
    request: Request
    add_rank: int  # the order it joins `scheduler.requests`, for the summary
    arrival_step: int = -1
    planted: tuple[int, ...] = ()
    spec_proposals: tuple[tuple[int, int], ...] = ()
    grammar_step: int = -1  # structured output (batched runner): the step its grammar's compile finishes at
    grammar_fails: bool = False


def load(st: BatchState, entries: Sequence[Entry]) -> None:
    if not entries:
        return
    st.grow_slots(max(e.slot for e in entries) + 1)
    stops = max(len(e.request.stop_token_ids) for e in entries)
    planted = max(len(e.planted) for e in entries)
    st.grow_wide("stop_tok", stops)
    st.grow_wide("stop_valid", stops)
    st.grow_wide("planted", planted)
    dev = st.device
    b = torch.tensor([e.instance for e in entries], dtype=torch.int64)
    s = torch.tensor([e.slot for e in entries], dtype=torch.int64)
    bd, sd = b.to(dev), s.to(dev)

    def put(field: torch.Tensor, values: Sequence[int | float | bool], dtype: torch.dtype = torch.int64) -> None:
        field[bd, sd] = torch.tensor(values, dtype=dtype).to(dev)

    reqs = [e.request for e in entries]
    put(st.prompt_len, [q.num_prompt_tokens for q in reqs])
    put(st.max_tokens, [q.max_tokens for q in reqs])
    put(st.min_tokens, [q.min_tokens for q in reqs])
    put(st.prio, [q.priority for q in reqs])
    put(st.arrival, [q.arrival_time for q in reqs], torch.float64)
    eos = [q.effective_eos_token_id for q in reqs]
    put(st.eos, [0 if x is None else x for x in eos])
    put(st.has_eos, [x is not None for x in eos], torch.bool)
    put(st.add_rank, [e.add_rank for e in entries])
    put(st.arrival_step, [e.arrival_step for e in entries])
    put(st.plen, [len(e.planted) for e in entries])
    put(st.grammar, [GRAMMAR_COMPILING if q.structured_output else NO_GRAMMAR for q in reqs])
    put(st.lora, [q.lora_int_id for q in reqs])
    put(st.skip_read, [q.skip_reading_prefix_cache for q in reqs], torch.bool)
    st.any_grammar = st.any_grammar or any(q.structured_output for q in reqs)
    put(st.grammar_step, [e.grammar_step for e in entries])
    put(st.grammar_fails, [e.grammar_fails for e in entries], torch.bool)
    if stops:
        rows = [list(q.stop_token_ids) + [0] * (stops - len(q.stop_token_ids)) for q in reqs]
        st.stop_tok[bd, sd, :stops] = torch.tensor(rows, dtype=torch.int64).to(dev)
        valid = [[i < len(q.stop_token_ids) for i in range(stops)] for q in reqs]
        st.stop_valid[bd, sd, :stops] = torch.tensor(valid, dtype=torch.bool).to(dev)
    if planted:
        rows = [list(e.planted) + [0] * (planted - len(e.planted)) for e in entries]
        st.planted[bd, sd, :planted] = torch.tensor(rows, dtype=torch.int64).to(dev)
    proposals = max(len(e.spec_proposals) for e in entries)
    if proposals:
        st.grow_wide("prop_nd", proposals)
        st.grow_wide("prop_na", proposals)
        for field, part in ((st.prop_nd, 0), (st.prop_na, 1)):
            rows = [[p[part] for p in e.spec_proposals] + [0] * (proposals - len(e.spec_proposals)) for e in entries]
            field[bd, sd, :proposals] = torch.tensor(rows, dtype=torch.int64).to(dev)
    if st.keyed:
        _load_hashes(st, entries)


def _load_hashes(st: BatchState, entries: Sequence[Entry]) -> None:
    """The prompt's block hashes and running hash residues, for requests of instances that cache."""
    caching = st.caching.tolist()
    bs = st.bs.tolist()
    L = st.L.tolist()
    mine = [e for e in entries if caching[e.instance]]
    if not mine:
        return
    dev = st.device
    X = max(e.request.num_prompt_tokens for e in mine)
    # L // bs hashes hold every full block a request will have; T passes L only before 0.29.0 (min_tokens holds
    # back the cap), and then `prefix_cache.append_token` grows the table.
    width = max(L[e.instance] // bs[e.instance] for e in mine)
    st.grow_wide("bhash", width)
    tokens = torch.tensor(
        [list(e.request.prompt_token_ids) + [0] * (X - e.request.num_prompt_tokens) for e in mine], dtype=torch.int64
    ).to(dev)
    lengths = torch.tensor([e.request.num_prompt_tokens for e in mine], dtype=torch.int64).to(dev)
    sizes = torch.tensor([bs[e.instance] for e in mine], dtype=torch.int64).to(dev)
    seeds = torch.tensor([chain_seed(e.request.lora_int_id) for e in mine], dtype=torch.int64).to(dev)
    hashes, h0, h1 = prompt_hashes(tokens, lengths, sizes, width, seeds)
    b = torch.tensor([e.instance for e in mine], dtype=torch.int64).to(dev)
    s = torch.tensor([e.slot for e in mine], dtype=torch.int64).to(dev)
    st.bhash[b, s, :width] = hashes
    st.nhash[b, s] = torch.div(lengths, sizes, rounding_mode="floor")
    st.h0[b, s], st.h1[b, s] = h0, h1


def priority_ranks(requests_by_slot: Sequence[Request]) -> list[int]:
    """Each request's rank by `Request.__lt__`: the PRIORITY waiting queue's pop order, as a sort key.

    Ranked on the host with the rule itself (`spec.rules.heap_key`), not a tensor twin: requests are
    ranked once, when they are loaded, and the step reads only the rank.
    """

    def key(i: int) -> tuple[object, ...]:
        q = requests_by_slot[i]
        return heap_key(q.priority, q.arrival_time, q.request_id)

    order = sorted(range(len(requests_by_slot)), key=key)
    ranks = [0] * len(order)
    for rank, slot in enumerate(order):
        ranks[slot] = rank
    return ranks
