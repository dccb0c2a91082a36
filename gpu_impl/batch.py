"""`run_batch(workloads, device) -> list[Trace]`: B workloads as B instances of one batched state.

The loop is `spec.engine.steps`, for all instances at once: at each step,
the arrivals of that step join (in workload order), the aborts of that step
are applied (in the given order), then `schedule()`, the fake model (the
tensor rule of `fake_model.py`, the same rule as `spec.engine.fake_model`),
and `update_from_output()`. Each instance then ends on its own, exactly
where `steps()` would stop it: once nothing is running or waiting, nothing
finished in the update, and no arrival or abort is still to come; or after
its workload's `max_steps` (a livelock, D1).

Spec decode: after the update the drafter's proposals (the tensor rule of
`fake_model.propose`) are set as `update_draft_token_ids` would. Instances
with a batch queue (async scheduling, pipeline parallel) follow
`_batch_queue_steps` instead: they schedule only when there is something to
schedule or report, queue the step in a `BatchQueue` of their own size
(`max_concurrent_batches`), and absorb the oldest queued step when the
queue is full or there is nothing to overlap; instances with and without a
queue share a batch. Workloads with prefix
caching form a batch of their own (`run_batch`). The output tokens each
request keeps are collected by the glue from the absorbed tokens.

Instances that ended are dropped from the batch (`BatchState.select`) once
they are an eighth of it, so a few long workloads do not keep the rest of
the batch on the device. Step records are built by `materialize.py`; the
per-step decisions are all tensor programs over every request of every
instance.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

import torch

from ..spec import engine as engine_loop
from ..spec.engine import drained_after
from ..spec.output import ModelRunnerOutput, SchedulerOutput
from ..spec.request import RequestStatus
from ..spec.trace import FinishedRequest, StepRecord, Trace
from ..spec.workload import Workload
from .batch_queue import BatchQueue
from .device import cpu_threads, pick_device
from .engine import TorchEngine
from .fake_model import fake_model, propose, update_draft_token_ids
from .load import Entry, load, priority_ranks
from .materialize import STATUS, outputs, summaries
from .state import BatchState
from .step import StepOut, schedule
from .update import abort, update_from_output

ENGINE_NAME = "torch"


def build_state(workloads: Sequence[Workload], device: torch.device) -> BatchState:
    """Every request of every workload in its slot (slot = index in the workload), none arrived yet."""
    st = BatchState(
        [w.config for w in workloads],
        max((len(w.requests) for w in workloads), default=1),
        device,
        fillers=[w.filler_token_id for w in workloads],
        throttled=any(w.throttle_prefills for w in workloads),
    )
    entries = []
    for b, w in enumerate(workloads):
        add_order = sorted(range(len(w.requests)), key=lambda i: (w.requests[i].arrival_step, i))
        rank = {slot: r for r, slot in enumerate(add_order)}
        entries += [
            Entry(
                b,
                i,
                r.request,
                rank[i],
                r.arrival_step,
                r.output_token_ids,
                r.spec_proposals,
                r.grammar.ready_step if r.grammar is not None else -1,
                r.grammar is not None and r.grammar.fails,
            )
            for i, r in enumerate(w.requests)
        ]
    load(st, entries)
    if st.any_priority:
        ranks = torch.zeros((st.B, st.R), dtype=torch.int64)
        for b, w in enumerate(workloads):
            if w.config.policy == "priority" and w.requests:
                ranks[b, : len(w.requests)] = torch.tensor(priority_ranks([r.request for r in w.requests]))
        st.prio_rank = ranks.to(device)
    return st


def advance(st: BatchState) -> tuple[StepOut, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One synchronous engine step for every instance, tensors only: schedule, the fake model,
    update_from_output (and the drafter under spec decode).

    Returns the step's `StepOut`, the sampled tokens and their counts, and the stopped mask. This is
    the hot path the benchmarks time; `run_batch` makes the same calls, with arrivals and aborts
    before them and the step records built in between (the output must be read before the update
    frees blocks).
    """
    out = schedule(st)
    gen, num_gen = fake_model(st, out.n_sched, out.n_spec, out.spec_vals)
    stopped = update_from_output(st, out.n_sched, out.sched_key, out.n_spec, gen, num_gen)
    if st.any_spec:
        update_draft_token_ids(st, *propose(st, out.n_sched, num_gen))
    return out, gen, num_gen, stopped


def run_batch(
    workloads: Sequence[Workload], device: str | torch.device | None = None, engine_name: str = ENGINE_NAME
) -> list[Trace]:
    """Run every workload as one instance of a single batch; the traces `spec.engine.run` would give, in order.

    Workloads with prefix caching run in a batch of their own: they need the keyed free queue and the
    walking waiting pass (`lru_free_queue.py`, `waiting_cached.py`), which the others need not pay for.
    A workload with controls (`spec.controls`: calls between steps, a host-side decision each), on a pooling
    model (whose pooled outputs the batched fake model does not produce), or finishing requests from outside with
    another status than aborted (`Abort.status`) runs on its own instance through the spec's engine loop
    (`TorchEngine`), the same tensor programs at B = 1.
    """
    workloads = list(workloads)
    if not workloads:
        return []
    dev = pick_device(device)
    groups: dict[bool, list[int]] = defaultdict(list)
    alone = [
        i for i, w in enumerate(workloads) if w.controls or w.config.runner == "pooling" or w.finishes_from_outside
    ]
    for i, w in enumerate(workloads):
        if i not in alone:
            groups[w.config.enable_prefix_caching or w.config.max_loras is not None].append(i)
    traces: dict[int, Trace] = {}
    for i in alone:
        trace = engine_loop.run(TorchEngine(workloads[i].config, dev), workloads[i])
        traces[i] = dataclasses.replace(trace, engine=engine_name)
    with cpu_threads(dev):
        for members in groups.values():
            traces.update(zip(members, _run([workloads[i] for i in members], dev, engine_name)))
    return [traces[i] for i in range(len(workloads))]


def _run(workloads: list[Workload], dev: torch.device, engine_name: str) -> list[Trace]:
    st = build_state(workloads, dev)
    slot_of = [{r.request_id: i for i, r in enumerate(w.requests)} for w in workloads]
    aborts_at: dict[int, list[tuple[int, list[int]]]] = defaultdict(list)
    mid_step_at: dict[int, dict[int, list[int]]] = defaultdict(dict)  # step -> workload -> slots (Abort.mid_step)
    for b, w in enumerate(workloads):
        per_step: dict[int, list[int]] = defaultdict(list)
        for a in w.aborts:
            if a.mid_step:
                mid_step_at[a.step].setdefault(b, []).append(slot_of[b][a.request_id])
            else:
                per_step[a.step].append(slot_of[b][a.request_id])
        for step, slots in per_step.items():
            aborts_at[step].append((b, slots))
    carried: dict[int, list[int]] = {}  # async: mid-step aborts of a step that absorbed nothing, applied next step
    records: list[list[StepRecord]] = [[] for _ in workloads]
    ends: list[str | None] = [None] * len(workloads)
    inst = list(range(len(workloads)))  # batch row -> workload index
    row_ids = [[r.request_id for r in w.requests] for w in workloads]
    queued = st.queue_size > 1  # a batch queue: async scheduling or pipeline parallel
    depth = int(st.queue_size.max()) if st.B else 1
    queue = BatchQueue(st.B, st.R, 1 + st.kmax, depth, dev) if st.any_queue else None
    in_flight: list[list[int]] = [[] for _ in workloads]  # per workload: queued steps, oldest first
    # Per workload, slot -> output tokens kept so far (glue: read back once per appended token).
    produced: list[dict[int, list[int]]] = [defaultdict(list) for _ in workloads]
    ended = 0
    for step in range(max(w.max_steps for w in workloads)):
        if not inst:
            break
        st.arrive(st.arrival_step == step)
        carried_in, carried = carried, {}
        planned = list(aborts_at.get(step, ()))
        for b, slots in carried_in.items():  # after the step's own aborts, as the engine loop applies them
            planned.append((b, slots))
        aborted_hits = _apply_aborts(st, _merged(planned), inst)
        if st.any_grammar:  # compiles that finish before this schedule() (`workload.Grammar`)
            st.grammars_compiled(st.grammar_step == step, st.grammar_fails)
        # A batch queue: schedule only if there is something to schedule or report (Scheduler.has_requests()).
        has_requests = st.live_mask().any(1) | st.fin_pending.any(1)
        throttle = None
        if st.any_prefill_cadence:  # a DP engine core's steps off its cadence (`Workload.throttle_prefills`)
            throttle = torch.tensor([workloads[i].throttled_at(step) for i in inst], dtype=torch.bool, device=dev)
        out = schedule(st, ~queued | has_requests if st.any_cadence else None, throttle)
        ids = [row_ids[i] for i in inst]
        live_rows = [r for r, i in enumerate(inst) if ends[i] is None]
        outs = outputs(st, out, ids, live_rows)  # before the update frees the blocks it lists
        gen, num_gen = fake_model(st, out.n_sched, out.n_spec, out.spec_vals)
        model_rows = _model_outputs(out, gen, num_gen, ids, live_rows)
        num_out_before = st.num_out
        mid_planned = mid_step_at.get(step, {})
        if queue is None:
            key, g = out.sched_key, gen
            mid_hits = _apply_aborts(st, list(mid_planned.items()), inst)  # EngineCore's aborts queue
            stopped = update_from_output(st, out.n_sched, key, out.n_spec, gen, num_gen)
            decisions: list[tuple[bool, bool, bool, bool]] | None = None
        else:
            # step_with_batch_queue: queue what was scheduled; absorb the oldest output unless the queue
            # still has room and there is (or was) work to overlap with.
            push = queued & has_requests
            queue.push(push, out.n_sched, out.sched_key, out.n_spec, gen, num_gen)
            busy = (out.n_sched.sum(1) > 0) | st.live_mask().any(1)
            hold = push & (queue.size < st.queue_size) & busy
            absorb = ~queued | (~hold & (queue.size > 0))
            # The aborts queue drains before an update: a row that absorbs nothing passes its mid-step
            # aborts to the next step (the input queue's copy of each abort).
            absorbing = absorb.tolist()
            row_of = {i: r for r, i in enumerate(inst)}
            now = [(b, s) for b, s in mid_planned.items() if b in row_of and absorbing[row_of[b]]]
            carried = {b: s for b, s in mid_planned.items() if b in row_of and not absorbing[row_of[b]]}
            mid_hits = _apply_aborts(st, now, inst)
            old = queue.pop(absorb & queued)
            sync = (~queued)[:, None]
            n, key, nspec, g, ng = (
                torch.where(sync.reshape(sync.shape + (1,) * (x.dim() - 2)), x, y)
                for x, y in zip((out.n_sched, out.sched_key, out.n_spec, gen, num_gen), old)
            )
            stopped = update_from_output(st, n, key, nspec, g, ng, absorb)
            # Per row: (pushed, held (the output stays queued), absorbed, queued).
            decisions = list(zip(*torch.stack([push, hold, absorb, queued]).tolist()))
        drafts = None
        if st.any_spec:
            draft_ids, draft_count = propose(st, out.n_sched, num_gen)
            update_draft_token_ids(st, draft_ids, draft_count)
            drafts = _drafts(draft_ids, draft_count, ids)

        sums = summaries(st, ids, live_rows)
        stb, sts = stopped.nonzero(as_tuple=True)
        _record_outputs(produced, inst, g, st.num_out - num_out_before)
        stop_cols = torch.stack([stb, sts, st.status[stb, sts], key[stb, sts]]).tolist()
        stops: dict[int, list[tuple[int, int, int, tuple[int, ...]]]] = defaultdict(list)
        for b, s, status, k in zip(*stop_cols):
            stops[b].append((k, s, status, tuple(produced[inst[b]].get(s, ()))))
        abort_out = {b: [(s, tuple(produced[inst[b]].get(s, ()))) for s in slots] for b, slots in aborted_hits.items()}
        # A mid-step abort keeps the outputs it had before this update (the update ignores its answer).
        for b, slots in mid_hits.items():
            abort_out.setdefault(b, []).extend((s, tuple(produced[inst[b]].get(s, ()))) for s in slots)
        fin_left = st.fin_pending.any(1).tolist() if queue is not None else []  # read only for queued rows

        for r in live_rows:
            i = inst[r]
            w, names = workloads[i], ids[r]
            scheduled = True
            updated: int | None = step  # the step whose output this update absorbed
            flight: tuple[int, ...] = ()  # steps still in flight
            output, model_output = outs[r], model_rows[r]
            pushed, held, absorbed, row_queued = decisions[r] if decisions is not None else (False, False, True, False)
            if row_queued:
                scheduled = pushed
                if pushed:
                    in_flight[i].append(step)
                else:
                    output, model_output = SchedulerOutput(), ModelRunnerOutput()
                updated = in_flight[i].pop(0) if absorbed else None
                flight = tuple(in_flight[i])
            finished: dict[str, FinishedRequest] = {}
            for s, toks in abort_out.get(r, ()):
                finished[names[s]] = FinishedRequest(RequestStatus.FINISHED_ABORTED, toks)
            # In the order update_from_output's loop finds them: the absorbed step's grant order.
            for _, s, status, toks in sorted(stops.get(r, ())):
                finished[names[s]] = FinishedRequest(STATUS[status], toks)
            mid_step = tuple(w.mid_step_aborts_at(step)) if i not in carried else ()
            record = StepRecord(
                step,
                tuple(q.request_id for q in w.arrivals_at(step)),
                tuple(w.aborts_at(step)) + tuple(row_ids[i][s] for s in carried_in.get(i, ())),
                output,
                model_output,
                sums[r],
                finished,
                updated_step=updated,
                draft_token_ids=(drafts.get(r, {}) if drafts else {}),
                scheduled=scheduled,
                in_flight=flight,
                aborted_mid_step=mid_step,
                grammars=dict(w.grammars_at(step)),
                throttle_prefills=scheduled and w.throttled_at(step),
            )
            records[i].append(record)
            if row_queued and held:
                pass  # the step ended with its output queued: nothing can have drained
            elif (
                not flight and not (row_queued and fin_left[r]) and i not in carried and drained_after(record, w)
            ):  # the engine loop's own stopping rule (spec/engine.py)
                ends[i] = "drained"
            if ends[i] is None and step + 1 >= w.max_steps:
                ends[i] = "max_steps"
            if ends[i] is not None:
                ended += 1
        if ended * 8 >= len(inst) or ended == len(inst):
            keep = [r for r, i in enumerate(inst) if ends[i] is None]
            if len(keep) < len(inst):
                index = torch.tensor(keep, dtype=torch.int64, device=dev)
                st.select(index)
                queued = queued.index_select(0, index)
                if queue is not None:
                    queue.select(index)
                inst = [inst[r] for r in keep]
            ended = 0
    return [Trace(w, tuple(records[i]), engine_name, ends[i] or "max_steps") for i, w in enumerate(workloads)]


def _record_outputs(
    produced: list[dict[int, list[int]]], inst: list[int], gen: torch.Tensor, appended: torch.Tensor
) -> None:
    """Append the tokens update_from_output kept (`appended` [B, R] leading entries of `gen`)."""
    ab, asl = (appended > 0).nonzero(as_tuple=True)
    if not ab.numel():
        return
    cols = torch.stack([ab, asl, appended[ab, asl]]).tolist()
    rows = gen[ab, asl].tolist()
    for b, s, count, tokens in zip(*cols, rows):
        produced[inst[b]][s].extend(tokens[:count])


def _model_outputs(
    out: StepOut,
    gen: torch.Tensor,
    num_gen: torch.Tensor,
    ids: Sequence[Sequence[str]],
    rows: Sequence[int],
) -> dict[int, ModelRunnerOutput]:
    """The fake model's answer per instance in `rows`: the sampled tokens of every scheduled request."""
    sb, ss = (out.n_sched > 0).nonzero(as_tuple=True)
    cols = torch.stack([sb, ss, num_gen[sb, ss]]).tolist()
    tokens = gen[sb, ss].tolist()
    per: dict[int, dict[str, tuple[int, ...]]] = defaultdict(dict)
    for b, s, g, t in zip(*cols, tokens):
        per[b][ids[b][s]] = tuple(t[:g])
    return {r: ModelRunnerOutput(per.get(r, {})) for r in rows}


def _drafts(
    drafts: torch.Tensor, count: torch.Tensor, ids: Sequence[Sequence[str]]
) -> dict[int, dict[str, tuple[int, ...]]]:
    """The drafter's proposals per instance row: request id -> drafts."""
    db, ds = (count > 0).nonzero(as_tuple=True)
    cols = torch.stack([db, ds, count[db, ds]]).tolist()
    rows = drafts[db, ds].tolist()
    per: dict[int, dict[str, tuple[int, ...]]] = defaultdict(dict)
    for b, s, c, d in zip(*cols, rows):
        per[b][ids[b][s]] = tuple(d[:c])
    return per


def _merged(planned: Sequence[tuple[int, list[int]]]) -> list[tuple[int, list[int]]]:
    """One entry per workload, its slots in the order given (a step's own aborts, then those carried to it)."""
    by: dict[int, list[int]] = {}
    for b, slots in planned:
        by.setdefault(b, []).extend(slots)
    return list(by.items())


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
