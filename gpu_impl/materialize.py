"""From tensors to the spec's objects: `SchedulerOutput`, `StateSummary`, finished records.

This is Python glue outside the hot path: the decisions are all made by
the time it runs. Each function first gathers what it needs into a few flat
tensors, sorted by instance and then by the order the spec wants, reads them
back to the host in one transfer per tensor, and builds the objects in one
walk. The work is linear in what is reported (scheduled requests, their new
blocks, live requests), like the reference's own output construction.

Layout (spec/output.py): `num_scheduled_tokens` in grant order (RUNNING pass
in running order, then admissions in order); `scheduled_new_reqs` = new
admissions then resumed ones, each with all its blocks and C before the
advance (the V2 runner lists resumed requests as new,
vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1642-1644));
`scheduled_cached_reqs` = the RUNNING pass's grants with only the blocks
allocated in this step, None if none; `scheduled_spec_decode_tokens` = the
drafts among each grant, in grant order (-1 for padding and placeholders).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..spec import request as spec_request
from ..spec.engine import gc_paused
from ..spec.output import CachedRequestData, NewRequestData, SchedulerOutput
from ..spec.request import RequestStatus
from ..spec.trace import RequestSummary, StateSummary
from .block_pool import expand_counts
from .state import BIG, GRAMMAR_COMPILED, GRAMMAR_COMPILING, GRAMMAR_FAILED, NO_GRAMMAR, BatchState
from .step import CACHED, NEW, RESUMED, StepOut

Tensor = torch.Tensor
STATUS = {int(s): s for s in RequestStatus}
GRAMMAR = {  # a slot's grammar state, as the summary names it
    NO_GRAMMAR: None,
    GRAMMAR_COMPILING: spec_request.GRAMMAR_COMPILING,
    GRAMMAR_COMPILED: spec_request.GRAMMAR_COMPILED,
    GRAMMAR_FAILED: spec_request.GRAMMAR_FAILED,
}


def _by_instance(mask: Tensor, key: Tensor) -> tuple[Tensor, Tensor]:
    """(instance, slot) of the masked entries, sorted by instance, then by `key`."""
    bi, si = mask.nonzero(as_tuple=True)
    k = key[bi, si]
    o = torch.sort(k, stable=True).indices
    bi, si = bi[o], si[o]
    o = torch.sort(bi, stable=True).indices
    return bi[o], si[o]


def _groups(bi: list[int], B: int) -> list[tuple[int, int]]:
    """[start, end) of each instance's run in a list sorted by instance."""
    bounds = [0] * (B + 1)
    for b in bi:
        bounds[b + 1] += 1
    for b in range(B):
        bounds[b + 1] += bounds[b]
    return [(bounds[b], bounds[b + 1]) for b in range(B)]


@dataclass(frozen=True)
class OutputColumns:
    """One step's `SchedulerOutput`s as [B, R] tensors, copied while the state still holds the step's blocks.

    Gathering them is a few tensor operations; building the objects is Python work per scheduled request.
    Split, the torch engine can hand out a step's output at tensor cost and build the objects only when
    someone reads them (`columnar.DeferredSchedulerOutput`). By then the update has freed blocks and later
    steps have taken them, so the new block ids are gathered here. The other columns are the step's own
    tensors, held as they are: `step.schedule` builds them afresh, and the two it takes from the state (C
    before the advance, the finished mask) the state replaces rather than writes into
    (`tests/unit/gpu_impl/test_torch_columnar.py` pins both). Only the drafts are copied: without spec decode they
    are the state's own (empty) tensor.
    """

    n_sched: Tensor  # [B, R] tokens granted; 0 = not scheduled
    sched_key: Tensor  # [B, R] position in num_scheduled_tokens
    kind: Tensor  # [B, R] CACHED / NEW / RESUMED
    c_before: Tensor  # [B, R] num_computed_tokens as the output reports it
    n_spec: Tensor  # [B, R] drafts among the granted tokens
    spec_vals: Tensor  # [B, R, k] their ids
    new_blocks: Tensor  # [B, R] blocks allocated in this step
    blocks: Tensor  # [sum of new_blocks] their ids, by instance, slot, then position in the table
    preempted: Tensor  # [B, R]
    finished: Tensor  # [B, R]


def columns(st: BatchState, out: StepOut) -> OutputColumns:
    count = torch.where(out.n_sched > 0, st.held - out.old_held, 0)
    total = int(count.sum())
    if total:  # a decode takes a new block once in block_size steps: gather only the slots that took one
        bi, si = count.nonzero(as_tuple=True)
        owner, q = expand_counts(count[bi, si], total)
        blocks = st.table[bi[owner], si[owner], out.old_held[bi, si][owner] + q]
    else:
        blocks = torch.zeros(0, dtype=torch.int64, device=st.device)
    return OutputColumns(
        n_sched=out.n_sched,
        sched_key=out.sched_key,
        kind=out.kind,
        c_before=out.c_before,
        n_spec=out.n_spec,
        spec_vals=out.spec_vals.clone(),
        new_blocks=count,
        blocks=blocks.long(),
        preempted=out.preempted,
        finished=out.finished,
    )


def outputs(
    st: BatchState, out: StepOut, ids: Sequence[Sequence[str]], want: Sequence[int] | None = None
) -> dict[int, SchedulerOutput]:
    """One `SchedulerOutput` per instance in `want` (default: every instance), by instance row."""
    return build_outputs(columns(st, out), ids, want)


@gc_paused
def build_outputs(
    c: OutputColumns, ids: Sequence[Sequence[str]], want: Sequence[int] | None = None
) -> dict[int, SchedulerOutput]:
    """The objects of `columns`: the scheduled requests in grant order, one read-back per tensor, one walk."""
    B, R = c.n_sched.shape
    bi, si = _by_instance(c.n_sched > 0, c.sched_key)
    flat = c.new_blocks.flatten()
    first = (flat.cumsum(0) - flat)[bi * R + si]  # where each request's new blocks start in `blocks`
    cols = torch.stack(
        [bi, si, c.n_sched[bi, si], c.kind[bi, si], c.c_before[bi, si], c.new_blocks[bi, si], c.n_spec[bi, si], first]
    ).tolist()
    blocks = c.blocks.tolist()
    spec_rows = c.spec_vals[bi, si].tolist() if c.spec_vals.shape[2] and any(cols[6]) else None
    pb, ps = c.preempted.nonzero(as_tuple=True)
    fb, fs = c.finished.nonzero(as_tuple=True)
    preempted: list[set[str]] = [set() for _ in range(B)]
    finished: list[set[str]] = [set() for _ in range(B)]
    for b, s in zip(pb.tolist(), ps.tolist()):
        preempted[b].add(ids[b][s])
    for b, s in zip(fb.tolist(), fs.tolist()):
        finished[b].add(ids[b][s])
    result: dict[int, SchedulerOutput] = {}
    groups = _groups(cols[0], B)
    for b in range(B) if want is None else want:
        start, end = groups[b]
        names = ids[b]
        rids = [names[s] for s in cols[1][start:end]]
        tokens = dict(zip(rids, cols[2][start:end]))
        new, resumed, cached = [], [], []
        spec: dict[str, tuple[int, ...]] = {}
        if spec_rows is not None:
            for i in range(start, end):
                if cols[6][i]:
                    spec[names[cols[1][i]]] = tuple(spec_rows[i][: cols[6][i]])
        rows = zip(rids, cols[3][start:end], cols[4][start:end], cols[5][start:end], cols[7][start:end])
        for rid, kind, computed, n_blocks, at in rows:
            blk = tuple(blocks[at : at + n_blocks]) if n_blocks else ()
            if kind == CACHED:
                cached.append(CachedRequestData(rid, computed, blk or None))
            elif kind == NEW:
                new.append(NewRequestData(rid, computed, blk, False))
            elif kind == RESUMED:
                resumed.append(NewRequestData(rid, computed, blk, True))
        result[b] = SchedulerOutput(
            num_scheduled_tokens=tokens,
            scheduled_new_reqs=tuple(new + resumed),
            scheduled_cached_reqs=tuple(cached),
            scheduled_spec_decode_tokens=spec,
            preempted_req_ids=frozenset(preempted[b]),
            finished_req_ids=frozenset(finished[b]),
        )
    return result


@gc_paused
def summaries(
    st: BatchState, ids: Sequence[Sequence[str]], want: Sequence[int] | None = None
) -> dict[int, StateSummary]:
    """One `StateSummary` per instance in `want` (default: every instance), by instance row: queues in order,
    free blocks, every live request (in add order)."""
    B = st.B
    rb, rs = _by_instance(st.running_mask(), st.run_pos)
    wkey = st.waiting_key()
    wb, ws = _by_instance(wkey < BIG, wkey)
    lb, ls = _by_instance(st.live_mask(), st.add_rank)
    live = torch.stack([lb, ls, st.status[lb, ls], st.C[lb, ls], st.num_tokens()[lb, ls], st.grammar[lb, ls]]).tolist()
    run, wait = torch.stack([rb, rs]).tolist(), torch.stack([wb, ws]).tolist()
    free = st.free.tolist()
    skipped = st.num_skipped_waiting().tolist() if st.tracks_reach else [0] * B
    rg, wg, lg = _groups(run[0], B), _groups(wait[0], B), _groups(live[0], B)
    result: dict[int, StateSummary] = {}
    for b in range(B) if want is None else want:
        names = ids[b]
        result[b] = StateSummary(
            running=tuple(names[s] for s in run[1][rg[b][0] : rg[b][1]]),
            waiting=tuple(names[s] for s in wait[1][wg[b][0] : wg[b][1]]),
            num_free_blocks=free[b],
            requests={
                names[live[1][i]]: RequestSummary(STATUS[live[2][i]], live[3][i], live[4][i], GRAMMAR[live[5][i]])
                for i in range(*lg[b])
            },
            num_skipped_waiting=skipped[b],
        )
    return result
