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

import functools
import gc
from collections.abc import Callable, Sequence
from typing import ParamSpec, TypeVar

import torch

from ..spec.output import CachedRequestData, NewRequestData, SchedulerOutput
from ..spec.request import RequestStatus
from ..spec.trace import RequestSummary, StateSummary
from .block_pool import _expand
from .state import BIG, BatchState
from .step import CACHED, NEW, RESUMED, StepOut

Tensor = torch.Tensor
STATUS = {int(s): s for s in RequestStatus}
Args = ParamSpec("Args")
Result = TypeVar("Result")


def _without_gc(build: Callable[Args, Result]) -> Callable[Args, Result]:
    """Build the objects with the cyclic garbage collector paused: they hold no cycles, and with
    100k requests its full collections, triggered by the allocations alone, cost more than the build."""

    @functools.wraps(build)
    def wrapper(*args: Args.args, **kwargs: Args.kwargs) -> Result:
        if not gc.isenabled():
            return build(*args, **kwargs)
        gc.disable()
        try:
            return build(*args, **kwargs)
        finally:
            gc.enable()

    return wrapper


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


@_without_gc
def outputs(
    st: BatchState, out: StepOut, ids: Sequence[Sequence[str]], want: Sequence[int] | None = None
) -> dict[int, SchedulerOutput]:
    """One `SchedulerOutput` per instance in `want` (default: every instance), by instance row."""
    B = st.B
    bi, si = _by_instance(out.n_sched > 0, out.sched_key)
    lo = out.old_held[bi, si]
    count = st.held[bi, si] - lo
    total = int(count.sum()) if count.numel() else 0
    if total:
        owner, q = _expand(count, total)
        blocks = st.table[bi[owner], si[owner], lo[owner] + q].tolist()
    else:
        blocks = []
    cols = torch.stack(
        [bi, si, out.n_sched[bi, si], out.kind[bi, si], out.c_before[bi, si], count, out.n_spec[bi, si]]
    ).tolist()
    spec_rows = out.spec_vals[bi, si].tolist() if out.spec_vals.shape[2] and any(cols[6]) else None
    pb, ps = out.preempted.nonzero(as_tuple=True)
    fb, fs = out.finished.nonzero(as_tuple=True)
    preempted: list[set[str]] = [set() for _ in range(B)]
    finished: list[set[str]] = [set() for _ in range(B)]
    for b, s in zip(pb.tolist(), ps.tolist()):
        preempted[b].add(ids[b][s])
    for b, s in zip(fb.tolist(), fs.tolist()):
        finished[b].add(ids[b][s])
    result: dict[int, SchedulerOutput] = {}
    groups = _groups(cols[0], B)
    first_block = [0]
    for c in cols[5]:
        first_block.append(first_block[-1] + c)
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
        pos = first_block[start]
        for rid, kind, computed, n_blocks in zip(rids, cols[3][start:end], cols[4][start:end], cols[5][start:end]):
            blk = tuple(blocks[pos : pos + n_blocks]) if n_blocks else ()
            pos += n_blocks
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


@_without_gc
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
    live = torch.stack([lb, ls, st.status[lb, ls], st.C[lb, ls], st.num_tokens()[lb, ls]]).tolist()
    run, wait = torch.stack([rb, rs]).tolist(), torch.stack([wb, ws]).tolist()
    free = st.free.tolist()
    rg, wg, lg = _groups(run[0], B), _groups(wait[0], B), _groups(live[0], B)
    result: dict[int, StateSummary] = {}
    for b in range(B) if want is None else want:
        names = ids[b]
        result[b] = StateSummary(
            running=tuple(names[s] for s in run[1][rg[b][0] : rg[b][1]]),
            waiting=tuple(names[s] for s in wait[1][wg[b][0] : wg[b][1]]),
            num_free_blocks=free[b],
            requests={
                names[live[1][i]]: RequestSummary(STATUS[live[2][i]], live[3][i], live[4][i]) for i in range(*lg[b])
            },
        )
    return result
