"""Trace consistency: the steps of a trace must follow from one another.

The monitors judge each step on its own (`catalogue`, `monitor`), so a trace
that was cut, spliced or edited can pass them all: every step still looks
like a step the scheduler could take, just not after the step before it.
These rules tie the records together, and `schedspec check` runs them
beside the monitors. They are not part of `check_trace`, because the
harness builds partial traces on purpose (a run cut at a divergence, a
whole run labelled "max_steps" for the monitors only).

What a record fixes, and so what is checked:

* `trace-step-numbers`: the records are steps 0..n-1, in order.
* `trace-inputs`: each step's arrivals and aborts are the workload's at that
  step, in the workload's order: the engine loop applies exactly those.
* `trace-in-flight` (async scheduling or pipeline parallel): the steps in flight are a FIFO batch queue of
  `max_concurrent_batches`.
  After a step it holds what it held before, plus this step if it scheduled,
  less the oldest if this step absorbed one, and `updated_step` is that
  oldest. A synchronous step absorbs itself and leaves nothing in flight.
  A step that scheduled nothing has an empty output.
* `trace-membership`: a request is live only from its arrival until it
  finishes; it leaves by an abort or by finishing in the update, and every
  request in `finished` was live.
* `trace-counters`: each survivor's status, C and T are what its status, C
  and T before the step become through this step's record. C is set to 0
  by a preemption and to the prefix hit (`scheduled_new_reqs[].num_computed_tokens`)
  by an admission. A running request's `scheduled_cached_reqs[].num_computed_tokens`
  is its C before the step. C then advances by the tokens granted. The
  update with the absorbed step's output takes back the drafts it rejected,
  unless that output is stale (the request was preempted after the step was
  scheduled), and T grows by every token it returned. A trimmed token only
  ever comes with a stop, and a stopped request is gone: its outputs are
  those it had plus 1..all of the returned ones. An aborted request ends
  with the outputs it had after the step before (aborts precede schedule()).
* `trace-end`: "drained" iff the last step drained (`engine.drained_after`
  and nothing in flight); otherwise the run must have used up
  `workload.max_steps`. A run always records step 0, so a trace has steps.

Deliberately not checked: queue order, free blocks, drafts, placeholders and
the finished-report timing, which the monitors already state (one home per
rule); token values, which are the fake model's and compared by the
differential harness; and whether a drained run went on past its drain,
which under async needs the engine loop's unreported-finish bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..engine import trace_end
from ..request import RequestStatus
from ..trace import StateSummary, StepRecord, Trace
from ..workload import Workload
from .monitor import Violation
from .replay import TraceReplay
from .views import StepView

RULES: tuple[tuple[str, str], ...] = (
    ("trace-step-numbers", "The records are steps 0..n-1, in order."),
    ("trace-inputs", "Each step's arrivals and aborts are the workload's at that step."),
    ("trace-in-flight", "updated_step and in_flight follow the batch queue: FIFO, this step in if it scheduled."),
    ("trace-membership", "Requests appear only by arrival and leave only by abort or by finishing."),
    (
        "trace-counters",
        "Status, num_computed_tokens and num_tokens follow from the step before and this step's record.",
    ),
    ("trace-end", "The end reason matches the trace: drained after the last step, or max_steps steps."),
)
RULE_NAMES = tuple(name for name, _ in RULES)


def check_consistency(trace: Trace, on_step: Callable[[int], None] | None = None) -> list[Violation]:
    """Every rule's first violation, in step order; `on_step(i)` after the i-th record is checked.

    One pass over `trace.steps`, so they may be a stream (`trace_stream.StreamedTrace`).
    """
    consistency = Consistency(trace.workload, TraceReplay(trace))
    for i, rec in enumerate(trace.steps):
        consistency.step(rec)
        if on_step is not None:
            on_step(i)
    return consistency.finish(trace.end)


class Consistency:
    """`check_consistency` a step at a time, driving a replay it may share with the monitors (`onepass`).

    Between steps it keeps the batch queue, the last record and the first
    violation of each rule; the replay keeps what it keeps (`replay.py`).
    """

    def __init__(self, workload: Workload, replay: TraceReplay) -> None:
        self.workload, self.replay = workload, replay
        self.prompt = {rid: r.num_prompt_tokens for rid, r in replay.requests.items()}
        self.queue: tuple[int, ...] = ()
        self.found: dict[str, Violation] = {}
        self.num_steps = 0
        self.carried: tuple[str, ...] = ()  # async mid-step aborts a step without an update passes to the next
        self.last: StepRecord | None = None

    def _report(self, rule: str, i: int, problems: Iterable[str]) -> None:
        for detail in problems:
            self.found.setdefault(rule, Violation(rule, i, detail))

    def step(self, rec: StepRecord) -> StepView:
        """Check the next record and advance the replay; the step's view, for the monitors."""
        i, replay, report = self.num_steps, self.replay, self._report
        where = f"steps[{i}]"
        if rec.step != i:
            report("trace-step-numbers", i, [f"{where}.step is {rec.step}, expected {i}"])
        report("trace-inputs", i, _inputs(self.workload, i, rec, where, self.carried, replay.last))
        # A batch queue: a step that absorbed no output drained no aborts queue; its mid-step aborts come next step.
        self.carried = (
            tuple(self.workload.mid_step_aborts_at(i))
            if self.workload.config.max_concurrent_batches > 1 and rec.updated_step is None
            else ()
        )
        report("trace-in-flight", i, _in_flight(self.workload, self.queue, rec, where))
        self.queue = rec.in_flight
        before = replay.before(rec)  # with the step's controls applied: a cache reset preempts before schedule()
        u = rec.updated_step
        absorbed = rec if u == rec.step else None if u is None else replay.records.get(u)
        status_of = _abort_status(self.workload, rec.step)
        report("trace-membership", i, _membership(before, rec, where, status_of))
        view = replay.step(rec)
        dropping = replay.dropped_in_update
        report(
            "trace-counters",
            i,
            _counters(
                view,
                before,
                rec,
                absorbed,
                replay.last_preempted,
                dropping,
                where,
                self.workload.config.runner == "pooling",
            ),
        )
        report("trace-counters", i, _aborted_outputs(before, rec, self.prompt, where, status_of))
        self.num_steps, self.last = i + 1, rec
        return view

    def finish(self, end: str) -> list[Violation]:
        found = dict(self.found)
        for detail in _end(self.workload, end, self.num_steps, self.last):
            found.setdefault("trace-end", Violation("trace-end", max(self.num_steps - 1, 0), detail))
        order = {name: k for k, name in enumerate(RULE_NAMES)}
        return sorted(found.values(), key=lambda v: (v.step, order[v.invariant]))


def _inputs(
    workload: Workload, i: int, rec: StepRecord, where: str, carried: tuple[str, ...], before: StateSummary
) -> Iterable[str]:
    arrivals = tuple(r.request_id for r in workload.arrivals_at(i))
    if rec.added != arrivals:
        yield f"{where}.added is {list(rec.added)}, but the workload's arrivals at step {i} are {list(arrivals)}"
    aborts = tuple(workload.aborts_at(i)) + carried
    if any(c.call == "pause" and c.mode == "abort" for c in workload.controls_at(i)):
        # A pause in mode abort then aborts every live request, in the order they were added (spec/controls.py).
        gone = set(aborts)
        live = (set(before.requests) | set(arrivals)) - gone
        added = sorted(workload.requests, key=lambda r: r.arrival_step)  # stable: workload order within a step
        aborts += tuple(r.request_id for r in added if r.request_id in live)
    if rec.aborted != aborts:
        yield f"{where}.aborted is {list(rec.aborted)}, but the workload's aborts at step {i} are {list(aborts)}"
    drains = workload.config.max_concurrent_batches == 1 or rec.updated_step is not None
    mid_step = tuple(workload.mid_step_aborts_at(i)) if drains else ()
    if rec.aborted_mid_step != mid_step:
        yield (
            f"{where}.aborted_mid_step is {list(rec.aborted_mid_step)}, but the workload's mid-step aborts at "
            f"step {i} are {list(mid_step)}"
        )


def _in_flight(workload: Workload, queue: tuple[int, ...], rec: StepRecord, where: str) -> Iterable[str]:
    if not rec.scheduled and (rec.output.num_scheduled_tokens or rec.model_output.sampled_token_ids):
        yield f"{where}.output grants {rec.output.total_num_scheduled_tokens} tokens, but the step scheduled nothing"
    size = workload.config.max_concurrent_batches
    if size == 1:
        if rec.updated_step != rec.step:
            yield f"{where}.updated_step is {rec.updated_step}, but a synchronous step absorbs itself ({rec.step})"
        if rec.in_flight or not rec.scheduled:
            yield (
                f"{where}.in_flight is {list(rec.in_flight)} (scheduled {rec.scheduled}), but a synchronous step "
                "schedules and leaves nothing in flight"
            )
        return
    pushed = queue + ((rec.step,) if rec.scheduled else ())
    oldest = pushed[0] if pushed and rec.updated_step is not None else None
    if rec.updated_step != oldest:
        yield f"{where}.updated_step is {rec.updated_step}, but the oldest step in flight is {oldest}"
    after = pushed[1:] if rec.updated_step is not None else pushed
    if rec.in_flight != after:
        yield f"{where}.in_flight is {list(rec.in_flight)}, but the batch queue holds {list(after)}"
    elif len(after) >= size:
        yield f"{where}.in_flight holds {len(after)} steps, but a batch queue of {size} leaves at most {size - 1}"


def _abort_status(workload: Workload, step: int) -> Callable[[str, bool], RequestStatus]:
    """The status each of the step's aborts finishes its request with (`Abort.status`): a mid-step abort the
    batch queue's loop carried to this step keeps its own."""

    def status_of(rid: str, mid_step: bool) -> RequestStatus:
        status = workload.abort_status(step, rid, mid_step)
        if status == RequestStatus.FINISHED_ABORTED and not mid_step and step > 0:
            return workload.abort_status(step - 1, rid, mid_step=True)
        return status

    return status_of


def _membership(
    before: StateSummary, rec: StepRecord, where: str, status_of: Callable[[str, bool], RequestStatus]
) -> Iterable[str]:
    for rid in rec.added:
        if rid in before.requests:
            yield f"{where}.added has {rid}, which is live already"
    live = set(before.requests) | set(rec.added)
    for rid, f in rec.finished.items():
        if rid not in live:
            yield f"{where}.finished has {rid}, which was not live"
        elif not f.status.is_finished:
            yield f"{where}.finished[{rid}].status is {f.status.name}, not a finished status"
    for rid, mid_step in (*((r, False) for r in rec.aborted), *((r, True) for r in rec.aborted_mid_step)):
        status = status_of(rid, mid_step)
        if rid in live and rid not in rec.finished:
            yield f"{where}.aborted has live {rid}, but it is not in finished"
        elif rid in live and rec.finished[rid].status != status:
            yield f"{where}.finished[{rid}].status is {rec.finished[rid].status.name}, but it was finished as {status.name}"
    for rid in rec.state.requests:
        if rid not in live:
            yield f"{where}.state.requests has {rid}, which never arrived (or left before)"
        elif rid in rec.finished:
            yield f"{where}.state.requests still has {rid}, which finished in this step"
    for rid in sorted(live - set(rec.state.requests) - set(rec.finished)):
        yield f"{where}.state.requests lost {rid}, which neither finished nor was aborted"
    for name, queue in (("running", rec.state.running), ("waiting", rec.state.waiting)):
        for rid in queue:
            if rid not in rec.state.requests:
                yield f"{where}.state.{name} has {rid}, which is not in state.requests"


def _counters(
    view: StepView,
    before: StateSummary,
    rec: StepRecord,
    absorbed: StepRecord | None,
    last_preempted: dict[str, int],
    dropping: set[str],
    where: str,
    pooling: bool = False,
) -> Iterable[str]:
    """The survivors' status, C and T from the view's `pre_` side (the replay's one rule for it) and the record."""
    out = rec.output
    admitted = {n.req_id for n in out.scheduled_new_reqs}
    running = {c.req_id: c.num_computed_tokens for c in out.scheduled_cached_reqs}
    for r in view.rows:
        rid = r.request_id
        if not r.pre_live or rid in rec.aborted_mid_step:  # aborted before the update: `_aborted_outputs` judges it
            continue
        arrived = RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR if r.pre_grammar_wait else RequestStatus.WAITING
        status = before.requests[rid].status if rid in before.requests else arrived
        c, how = r.pre_num_computed_tokens, f"{r.pre_num_computed_tokens} before"
        if r.preempted:
            status, c, how = RequestStatus.PREEMPTED, 0, "0 on preemption"
        if rid in admitted:
            status, c, how = RequestStatus.RUNNING, r.num_hit_tokens, f"{r.num_hit_tokens} hit on admission"
        elif rid in running and running[rid] != c:
            yield (
                f"{where}.output.scheduled_cached_reqs[{rid}].num_computed_tokens is {running[rid]}, "
                f"but its num_computed_tokens before the step is {c}"
            )
        if r.scheduled:
            c, how = c + r.num_scheduled, f"{how} + {r.num_scheduled} scheduled"
        returned: tuple[int, ...] = ()
        stale = absorbed is not None and absorbed.step < last_preempted.get(rid, -1)
        if absorbed is not None and rid in absorbed.output.num_scheduled_tokens and not (stale and rid in dropping):
            returned = absorbed.model_output.sampled_token_ids.get(rid, ())
            drafts = absorbed.output.scheduled_spec_decode_tokens.get(rid, ())
            if drafts and returned and not stale and c > 0:
                rejected = len(drafts) - max(len(returned) - 1, 0)
                c, how = c - rejected, f"{how} - {rejected} rejected"
        if rid in rec.finished:
            # It stopped on one of the returned tokens: the ones after it were trimmed. A failed grammar ends a
            # request with what it had (grammar-wait-exact judges when).
            outputs, had = len(rec.finished[rid].output_token_ids), r.pre_num_tokens - r.num_prompt_tokens
            # A pooling model's request ends on its pooled output with none (pooling-exact judges when).
            if rec.finished[rid].status == RequestStatus.FINISHED_ERROR or pooling:
                if outputs != had:
                    yield f"{where}.finished[{rid}].output_token_ids has {outputs} tokens, expected its {had}"
            elif not had < outputs <= had + len(returned):
                yield (
                    f"{where}.finished[{rid}].output_token_ids has {outputs} tokens, expected {had} before "
                    f"+ 1..{len(returned)} returned"
                )
            continue
        if not r.post_live:
            continue
        got, t = rec.state.requests[rid], r.pre_num_tokens + len(returned)
        # A grammar found compiled promotes its request to WAITING (whether the pass got to it: grammar-wait-exact).
        promoted = (
            status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
            and got.status == RequestStatus.WAITING
            and not r.pre_blocked
        )
        if got.status != status and not promoted:
            yield f"{where}.state.requests[{rid}].status is {got.status.name}, expected {status.name}"
        if got.num_computed_tokens != c:
            yield (
                f"{where}.state.requests[{rid}].num_computed_tokens is {got.num_computed_tokens}, expected {c} ({how})"
            )
        if got.num_tokens != t:
            yield (
                f"{where}.state.requests[{rid}].num_tokens is {got.num_tokens}, expected {t} "
                f"({r.pre_num_tokens} before + {len(returned)} returned)"
            )


def _aborted_outputs(
    before: StateSummary,
    rec: StepRecord,
    prompt: dict[str, int],
    where: str,
    status_of: Callable[[str, bool], RequestStatus],
) -> Iterable[str]:
    """An abort comes before schedule(), or before the update: the request ends with the outputs it had after the
    step before (schedule() adds no token)."""
    for rid in (*rec.aborted, *rec.aborted_mid_step):
        f = rec.finished.get(rid)
        if f is None or f.status != status_of(rid, rid in rec.aborted_mid_step):
            continue
        had = before.requests[rid].num_tokens - prompt[rid] if rid in before.requests else 0
        if len(f.output_token_ids) != had:
            yield (
                f"{where}.finished[{rid}].output_token_ids has {len(f.output_token_ids)} tokens, "
                f"but it had {had} when aborted"
            )


def _end(w: Workload, end: str, n: int, last: StepRecord | None) -> Iterable[str]:
    """`last` is the last of the `n` records, None when there are none."""
    if last is None:
        yield f"steps: the trace has 0 steps, but every run records step 0 (end is {end!r})"
        return
    drained = trace_end(last, w) == "drained"
    if end == "drained" and not drained:
        yield f"end is 'drained', but step {n - 1} does not drain: {_not_drained(last, w.last_event_step)}"
    elif end != "drained" and drained:
        yield f"end is {end!r}, but step {n - 1} drained: a run that drains says 'drained'"
    elif end != "drained" and n != w.max_steps:
        yield f"end is {end!r}, but the trace has {n} steps, not workload.max_steps = {w.max_steps}"
    if n > w.max_steps:
        yield f"steps: the trace has {n} steps, more than workload.max_steps = {w.max_steps}"


def _not_drained(last: StepRecord, last_event_step: int) -> str:
    """Why `drained_after` (or the batch queue) says no, for the message only."""
    s = last.state
    live = list(s.running) + list(s.waiting)
    if live:
        return f"state has {len(live)} live requests ({', '.join(live[:3])}{', ...' if len(live) > 3 else ''})"
    if last.step < last_event_step:
        return f"the workload still has arrivals or aborts at step {last_event_step}"
    if last.in_flight:
        return f"in_flight still holds steps {list(last.in_flight)}"
    unreported = sorted(rid for rid in last.finished if rid not in last.aborted)
    return f"finished {', '.join(unreported)} is reported only by a next step"
