"""`run_batch(workloads, device) -> list[Trace]`: B workloads as B instances of one batched state.

The loop is `spec.engine.steps`, for all instances at once: at each step,
the arrivals of that step join (in workload order), the aborts of that step
are applied (in the given order), then `schedule()`, the fake model (the
tensor rule of `fake_model.py`, the same rule as `spec.engine.fake_model`),
and `update_from_output()`. Each instance then ends on its own, exactly
where `steps()` would stop it: once nothing is running or waiting, nothing
finished in the update, and no arrival or abort is still to come; or after
its workload's `max_steps` (a livelock, semantics doc D1).

Instances that ended are dropped from the batch (`BatchState.select`) once
they are an eighth of it, so a few long workloads do not keep the rest of
the batch on the device. Step records are built by `materialize.py`; the
per-step decisions are all tensor programs over every request of every
instance.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch

from ..spec.engine import drained_after
from ..spec.output import ModelRunnerOutput
from ..spec.request import RequestStatus
from ..spec.trace import FinishedRequest, StepRecord, Trace
from ..spec.workload import Workload
from .device import cpu_threads, pick_device
from .load import Entry, load, priority_ranks
from .materialize import STATUS, outputs, summaries
from .state import BatchState
from .step import StepOut, schedule
from .update import abort, update_from_output
from .fake_model import fake_model

ENGINE_NAME = "torch"


def build_state(workloads: Sequence[Workload], device: torch.device) -> BatchState:
    """Every request of every workload in its slot (slot = index in the workload), none arrived yet."""
    st = BatchState([w.config for w in workloads], max((len(w.requests) for w in workloads), default=1), device,
                    fillers=[w.filler_token_id for w in workloads])
    entries = []
    for b, w in enumerate(workloads):
        add_order = sorted(range(len(w.requests)), key=lambda i: (w.requests[i].arrival_step, i))
        rank = {slot: r for r, slot in enumerate(add_order)}
        entries += [Entry(b, i, r.request, rank[i], r.arrival_step, r.output_token_ids) for i, r in enumerate(w.requests)]
    load(st, entries)
    if st.any_priority:
        ranks = torch.zeros((st.B, st.R), dtype=torch.int64)
        for b, w in enumerate(workloads):
            if w.config.policy == "priority" and w.requests:
                ranks[b, : len(w.requests)] = torch.tensor(priority_ranks([r.request for r in w.requests]))
        st.prio_rank = ranks.to(device)
    return st


def advance(st: BatchState) -> tuple[StepOut, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One engine step for every instance, tensors only: schedule, the fake model, update_from_output.

    Returns the step's `StepOut`, the sampled tokens and mask, and the stopped mask. This is the hot
    path the benchmarks time; `run_batch` makes the same three calls, with arrivals and aborts before
    them and the step records built in between (the output must be read before the update frees blocks).
    """
    out = schedule(st)
    token, sampled = fake_model(st, out.n_sched)
    return out, token, sampled, update_from_output(st, out.sched_key, token, sampled)


def _outputs_of(w: Workload, rid: str, count: int) -> tuple[int, ...]:
    return tuple(w.sampled_token(rid, i) for i in range(count))


def run_batch(workloads: Sequence[Workload], device: str | torch.device | None = None,
              engine_name: str = ENGINE_NAME) -> list[Trace]:
    """Run every workload as one instance of a single batch; the traces `spec.engine.run` would give, in order."""
    workloads = list(workloads)
    if not workloads:
        return []
    dev = pick_device(device)
    with cpu_threads(dev):
        return _run(workloads, dev, engine_name)


def _run(workloads: list[Workload], dev: torch.device, engine_name: str) -> list[Trace]:
    st = build_state(workloads, dev)
    slot_of = [{r.request_id: i for i, r in enumerate(w.requests)} for w in workloads]
    aborts_at: dict[int, list[tuple[int, list[int]]]] = defaultdict(list)
    for b, w in enumerate(workloads):
        per_step: dict[int, list[int]] = defaultdict(list)
        for a in w.aborts:
            per_step[a.step].append(slot_of[b][a.request_id])
        for step, slots in per_step.items():
            aborts_at[step].append((b, slots))
    records: list[list[StepRecord]] = [[] for _ in workloads]
    ends: list[str | None] = [None] * len(workloads)
    inst = list(range(len(workloads)))  # batch row -> workload index
    row_ids = [[r.request_id for r in w.requests] for w in workloads]
    ended = 0
    for step in range(max(w.max_steps for w in workloads)):
        if not inst:
            break
        st.arrive(st.arrival_step == step)
        aborted_hits = _apply_aborts(st, aborts_at.get(step, ()), inst)
        out = schedule(st)
        ids = [row_ids[i] for i in inst]
        live_rows = [r for r, i in enumerate(inst) if ends[i] is None]
        outs = outputs(st, out, ids, live_rows)  # before the update frees the blocks it lists
        token, sampled = fake_model(st, out.n_sched)
        stopped = update_from_output(st, out.sched_key, token, sampled)

        sums = summaries(st, ids, live_rows)
        sb, ss = sampled.nonzero(as_tuple=True)
        tok = token[sb, ss].tolist()
        samples: dict[int, dict[int, int]] = defaultdict(dict)
        for b, s, t in zip(sb.tolist(), ss.tolist(), tok):
            samples[b][s] = t
        stb, sts = stopped.nonzero(as_tuple=True)
        stop_status = st.status[stb, sts].tolist()
        num_out = st.num_out
        stop_out = num_out[stb, sts].tolist()
        stops: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        for b, s, status, n in zip(stb.tolist(), sts.tolist(), stop_status, stop_out):
            stops[b].append((s, status, n))
        abort_out = {b: [(s, int(num_out[b, s])) for s in slots] for b, slots in aborted_hits.items()}

        for r in live_rows:
            i = inst[r]
            w, names, output = workloads[i], ids[r], outs[r]
            slot = slot_of[i]
            model_output = ModelRunnerOutput({rid: ((samples[r][slot[rid]],) if slot[rid] in samples[r] else ())
                                              for rid in output.num_scheduled_tokens})
            finished: dict[str, FinishedRequest] = {}
            for s, n in abort_out.get(r, ()):
                finished[names[s]] = FinishedRequest(RequestStatus.FINISHED_ABORTED, _outputs_of(w, names[s], n))
            in_update = stops.get(r, ())
            position = {rid: k for k, rid in enumerate(output.num_scheduled_tokens)} if len(in_update) > 1 else {}
            for s, status, n in sorted(in_update, key=lambda e: position.get(names[e[0]], 0)):
                finished[names[s]] = FinishedRequest(STATUS[status], _outputs_of(w, names[s], n))
            state = sums[r]
            record = StepRecord(step, tuple(q.request_id for q in w.arrivals_at(step)),
                                tuple(w.aborts_at(step)), output, model_output, state, finished)
            records[i].append(record)
            if drained_after(record, w):  # the engine loop's own stopping rule (spec/engine.py)
                ends[i] = "drained"
            elif step + 1 >= w.max_steps:
                ends[i] = "max_steps"
            if ends[i] is not None:
                ended += 1
        if ended * 8 >= len(inst) or ended == len(inst):
            keep = [r for r, i in enumerate(inst) if ends[i] is None]
            if len(keep) < len(inst):
                st.select(torch.tensor(keep, dtype=torch.int64, device=dev))
                inst = [inst[r] for r in keep]
            ended = 0
    return [Trace(w, tuple(records[i]), engine_name, ends[i] or "max_steps") for i, w in enumerate(workloads)]


def _apply_aborts(st: BatchState, planned: Sequence[tuple[int, list[int]]], inst: list[int]) -> dict[int, list[int]]:
    """This step's aborts, for the instances still in the batch; returns the slots each one finished, in order."""
    row = {i: r for r, i in enumerate(inst)}
    planned = [(row[b], slots) for b, slots in planned if b in row]
    if not planned:
        return {}
    N = max(len(slots) for _, slots in planned)
    slots = torch.zeros((st.B, N), dtype=torch.int64)
    valid = torch.zeros((st.B, N), dtype=torch.bool)
    for r, s in planned:
        slots[r, : len(s)] = torch.tensor(s)
        valid[r, : len(s)] = True
    slots, valid = slots.to(st.device), valid.to(st.device)
    hit = abort(st, slots, valid)
    hb, hj = hit.nonzero(as_tuple=True)
    result: dict[int, list[int]] = defaultdict(list)
    for b, s in zip(hb.tolist(), slots[hb, hj].tolist()):
        result[b].append(s)
    return result
