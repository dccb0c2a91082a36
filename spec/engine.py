"""The engine protocol and the one engine loop every engine is driven by.

An engine is anything that can take requests and aborts, schedule a step,
and absorb the model's output: our reference, our torch engine, the real
vLLM behind a pipe, or a third party's scheduler. The loop that feeds it a
workload, and the fake model that answers each step, live here, once, so two
engines can only differ in what they decide, never in how they were driven.

The loop mirrors vLLM's synchronous `EngineCore.step` (vllm/v1/engine/core.py:EngineCore.step):
arrivals and aborts, then `schedule()`, then the model, then
`update_from_output()` with that same step's output, then (spec decode) the
drafter's proposals. Under async scheduling or pipeline parallel it mirrors
`step_with_batch_queue` instead, with up to `max_concurrent_batches` steps
in flight.
"""

from __future__ import annotations

import functools
import gc
import inspect
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ParamSpec, Protocol, TypeVar

from .config import SchedulerConfig
from .controls import ControlCall, EngineControls
from .errors import SpecError
from .output import ModelRunnerOutput, SchedulerOutput
from .request import Request, RequestStatus
from .rules import pooler_output_ready
from .trace import FinishedRequest, StateSummary, StepRecord, Trace
from .workload import Workload


class Engine(Protocol):
    """One scheduler instance. `name` identifies it in traces and certificates."""

    name: str

    def add_request(self, request: Request) -> None: ...

    def abort_request(self, request_id: str) -> FinishedRequest | None:
        """Finish a request as aborted; None if it had already finished."""

    def schedule(self) -> SchedulerOutput:
        """One step's schedule. An engine that models the prefill cadence (`features` names "prefill-cadence") also
        takes `throttle_prefills=True`, the DP engine core's call off its cadence; no other engine is passed it."""

    def summary(self) -> StateSummary: ...

    def update_from_output(
        self, output: SchedulerOutput, model_output: ModelRunnerOutput
    ) -> Mapping[str, FinishedRequest]:
        """Absorb one step's model output; return the requests that finished in it."""

    def update_draft_token_ids(self, draft_token_ids: Mapping[str, tuple[int, ...]]) -> None:
        """Sync spec decode only: the drafter's proposals after a step. Engines without spec decode may omit it."""

    # Optional, and so not a member here (a type checker would demand it of every engine):
    # `grammar_compiled(request_id: str, compiled: bool) -> None`, structured output: a request's grammar
    # finished compiling (`compiled`) or failed, before the next schedule(); vLLM's compile future becoming
    # done. An id that is no longer live is ignored. An engine without it declares structured output outside
    # its scope (`FEATURE_METHODS`, `workload.Grammar`).
    # `reset_prefix_cache(reset_running_requests: bool) -> bool` and `set_pause_state(pause_state: PauseState)`,
    # the scheduler's calls outside schedule() (`spec.controls`): vLLM's `Scheduler` methods of those names.
    # `finish_request(request_id: str, status: RequestStatus) -> FinishedRequest | None`: `abort_request` with
    # another finished status (`workload.Abort.status`), vLLM's `finish_requests(request_id, status)`.


EngineFactory = Callable[[SchedulerConfig], Engine]

# The protocol's optional methods that declare a deployment feature: an engine without one declares the feature
# outside its scope, and a campaign leaves that feature's workloads out (`conformance/engines/declared_scope.py`).
FEATURE_METHODS: dict[str, str] = {
    "grammar_compiled": "structured output",
    "reset_prefix_cache": "the engine's calls outside schedule() (reset_prefix_cache, set_pause_state: spec/controls.py)",
    "set_pause_state": "the engine's calls outside schedule() (reset_prefix_cache, set_pause_state: spec/controls.py)",
    "finish_request": "requests finished from outside with a status other than aborted (workload.Abort.status)",
}
# The deployment features that reach an engine through the config and the requests alone (LoRA: `max_loras`,
# `Request.lora_int_id`; pooling: `runner`, and the pooled ids in `ModelRunnerOutput.pooler_output`): an engine
# declares it models one by naming it in a class attribute `features`.
DECLARED_FEATURES: dict[str, str] = {
    "lora": "LoRA (config.max_loras, Request.lora_int_id)",
    "pipeline-parallel": "pipeline parallel (config.pipeline_parallel_size: batches in flight, the decode cadence)",
    "pooling": "pooling models (config.runner 'pooling': pooled outputs, nothing sampled; "
    "Request.skip_reading_prefix_cache)",
    "prefill-cadence": "the prefill cadence (config.prefill_schedule_interval; a DP engine core's "
    "schedule(throttle_prefills=True), `Workload.throttle_prefills`)",
}

Args = ParamSpec("Args")
Result = TypeVar("Result")


def gc_paused(step: Callable[Args, Result]) -> Callable[Args, Result]:
    """Run `step` with Python's cyclic garbage collector paused.

    A step allocates a few objects per scheduled request (outputs, dicts, tuples) and none of them in a
    cycle: they die by reference counting. The collector does not know that. At 10,000 running requests its
    collections, triggered by the allocations alone, scan every live request again and again within one
    step: about a fifth of a reference step's median time, and twice its slowest steps, measured. Paused,
    the allocations are counted and collected once, after the step. vLLM makes the same trade by freezing
    its startup heap (vllm/utils/gc_utils.py:freeze_gc_heap). An engine whose step builds cycles must not
    use this.
    """

    @functools.wraps(step)
    def wrapper(*args: Args.args, **kwargs: Args.kwargs) -> Result:
        if not gc.isenabled():
            return step(*args, **kwargs)
        gc.disable()
        try:
            return step(*args, **kwargs)
        finally:
            gc.enable()

    return wrapper


def fake_model(workload: Workload, output: SchedulerOutput, after_schedule: StateSummary) -> ModelRunnerOutput:
    """vLLM's GPU runner without the GPU: planted samples for every request that completed its prefill.

    A request whose `num_computed_tokens` is still short of its tokens after
    the advance is in a partial prefill chunk (vLLM's `is_prefill_chunk`) and
    samples nothing. Otherwise the model samples at the position after its
    last scheduled non-draft token: output index `C - drafts - prompt`,
    counted from C after the advance, so it also holds one step ahead under
    async scheduling, and a recomputed request continues where it stopped.
    With drafts scheduled, it verifies them as a real verifier does: each
    draft that equals the model's own token at its position is accepted and
    the model samples on; the first mismatch ends the run, so `len(gen)` is
    accepted + 1. The placeholder drafts `-1` (padding, async) never match.

    A pooling runner samples nothing, and pools each request whose scheduled
    tokens end exactly at its prompt's end (`spec.rules.pooler_output_ready`).
    """
    sampled: dict[str, tuple[int, ...]] = {}
    if workload.config.runner == "pooling":
        pooled = frozenset(
            rid
            for rid, n in output.num_scheduled_tokens.items()
            if pooler_output_ready(
                after_schedule.requests[rid].num_computed_tokens - n, n, workload.request(rid).request.num_prompt_tokens
            )
        )
        return ModelRunnerOutput({rid: () for rid in output.num_scheduled_tokens}, pooled)
    for rid in output.num_scheduled_tokens:
        r = after_schedule.requests[rid]
        if r.num_computed_tokens < r.num_tokens:
            sampled[rid] = ()
            continue
        drafts = output.scheduled_spec_decode_tokens.get(rid, ())
        index = r.num_computed_tokens - len(drafts) - workload.request(rid).request.num_prompt_tokens
        generated = []
        for j in range(len(drafts) + 1):
            token = workload.sampled_token(rid, index + j)
            generated.append(token)
            if j == len(drafts) or drafts[j] != token:
                break
        sampled[rid] = tuple(generated)
    return ModelRunnerOutput(sampled)


class Drafter:
    """The ngram-like drafter of sync spec decoding, played from the workload.

    After a step in which a request sampled and goes on running, the drafter
    proposes its next `(num_drafts, num_accepted)` entry: the first
    `num_accepted` drafts are the tokens the model will sample (the planted
    outputs at those positions), the rest are wrong on purpose (the planted
    token + 1). So the workload fixes the accepted count, `fake_model`
    confirms it by plain verification, and every engine sees the same token
    ids. A proposal is consumed whether or not the scheduler keeps it.
    """

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.num_proposed: dict[str, int] = {}

    def propose(
        self, output: SchedulerOutput, model_output: ModelRunnerOutput, after_update: StateSummary
    ) -> dict[str, tuple[int, ...]]:
        drafts: dict[str, tuple[int, ...]] = {}
        for rid in output.num_scheduled_tokens:
            r = after_update.requests.get(rid)
            if not model_output.sampled_token_ids.get(rid) or r is None or r.status != RequestStatus.RUNNING:
                continue
            index = self.num_proposed.get(rid, 0)
            self.num_proposed[rid] = index + 1
            num_drafts, num_accepted = self.workload.spec_proposal(rid, index)
            if num_drafts == 0:
                continue
            next_output = r.num_tokens - self.workload.request(rid).request.num_prompt_tokens
            truth = [self.workload.sampled_token(rid, next_output + j) for j in range(num_drafts)]
            drafts[rid] = tuple(t if j < num_accepted else t + 1 for j, t in enumerate(truth))
        return drafts


def steps(engine: Engine, workload: Workload) -> Iterator[StepRecord]:
    """Drive `engine` through `workload` one step at a time, yielding each step's record.

    It stops once every request has finished and been reported, or after
    `workload.max_steps` steps: vLLM 0.33.0 has livelocks (D1),
    and a trace must end. Lock-step comparison consumes two of these at once.
    """
    if workload.config.max_concurrent_batches > 1:
        yield from _batch_queue_steps(engine, workload)
        return
    drafter = Drafter(workload) if workload.config.num_speculative_tokens > 0 else None
    controls = _controls_for(engine, workload)
    unreported = False  # finished ids the next schedule() reports
    for step in range(workload.max_steps):
        idle_calls = controls.when_idle(unreported, in_flight=False)
        early, _ = _apply_controls(controls, engine, workload, step, unreported, False, {}, early=True)
        added, aborted, finished, grammars = _arrivals_and_aborts(engine, workload, step)
        idle_calls += early
        calls, paused_aborts = _apply_controls(
            controls, engine, workload, step, bool(finished) or unreported, False, finished
        )
        aborted += paused_aborts
        unreported = unreported or bool(finished)
        output = _schedule(engine, workload, step)
        model_output = fake_model(workload, output, engine.summary())
        mid_step = _abort(engine, workload.mid_step_aborts_at(step), finished, _mid_step_status(workload, step))
        finished.update(engine.update_from_output(output, model_output))
        unreported = any(rid not in aborted for rid in finished)
        drafts: dict[str, tuple[int, ...]] = {}
        if drafter is not None and output.total_num_scheduled_tokens > 0:  # vllm/v1/engine/core.py:EngineCore.post_step
            drafts = drafter.propose(output, model_output, engine.summary())
            if drafts:
                engine.update_draft_token_ids(drafts)
        record = StepRecord(
            step,
            added,
            aborted,
            output,
            model_output,
            engine.summary(),
            finished,
            draft_token_ids=drafts,
            aborted_mid_step=mid_step,
            grammars=grammars,
            throttle_prefills=workload.throttled_at(step),
            controls=idle_calls + calls,
        )
        yield record
        if drained_after(record, workload):
            return


def _controls_for(engine: Engine, workload: Workload) -> EngineControls:
    """The run's `EngineControls`; an engine without the scheduler's control methods is refused up front when the
    workload has controls."""
    if workload.controls:
        for method in ("reset_prefix_cache", "set_pause_state"):
            _optional_method(engine, method, "calling the engine outside schedule() (the workload's controls)")
    return EngineControls(engine)


def _optional_method(engine: Engine, method: str, why: str) -> Any:
    """The engine's optional method of a deployment feature (`FEATURE_METHODS`), or one line saying the workload
    needs a feature outside the engine's declared scope."""
    fn = getattr(engine, method, None)
    if not callable(fn):
        raise SpecError(
            f"engine {engine.name!r}",
            method,
            f"is missing: {why} is outside the engine's declared scope (docs/engines.md)",
        )
    return fn


def _apply_controls(
    controls: EngineControls,
    engine: Engine,
    workload: Workload,
    step: int,
    unreported: bool,
    in_flight: bool,
    finished: dict[str, FinishedRequest],
    early: bool = False,
) -> tuple[tuple[ControlCall, ...], tuple[str, ...]]:
    """The step's controls after its arrivals (which `controls` learns the order of), aborts and grammars; `early`:
    those before them instead (`Control.before_inputs`)."""
    if not early:
        for request in workload.arrivals_at(step):
            controls.added[request.request_id] = None
    step_controls = [c for c in workload.controls_at(step) if c.before_inputs == early]
    if not step_controls:
        return (), ()
    return controls.apply(step_controls, unreported, in_flight, lambda ids: _abort(engine, ids, finished))


def _schedule(engine: Engine, workload: Workload, step: int) -> SchedulerOutput:
    """`engine.schedule()`, with `throttle_prefills=True` where the workload's DP engine core throttles the step
    (vllm/v1/engine/core.py:EngineCore.step calls `schedule(self._should_throttle_prefills())`)."""
    if not workload.throttled_at(step):
        return engine.schedule()
    if not _takes_throttle(engine):
        raise SpecError(
            f"engine {engine.name!r}",
            "schedule",
            "takes no throttle_prefills: the workload throttles prefills (a DP engine core), which is outside the "
            "engine's declared scope (docs/engines.md)",
        )
    return engine.schedule(throttle_prefills=True)  # type: ignore[call-arg]


def _takes_throttle(engine: Engine) -> bool:
    """Whether `engine.schedule` has a `throttle_prefills` parameter (or takes any keyword)."""
    try:
        params = inspect.signature(engine.schedule).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: it says nothing, so it takes nothing
        return False
    return any(p.name == "throttle_prefills" or p.kind == inspect.Parameter.VAR_KEYWORD for p in params)


def _arrivals_and_aborts(
    engine: Engine, workload: Workload, step: int
) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, FinishedRequest], dict[str, bool]]:
    """The inputs before a step's schedule(): arrivals, aborts, then the grammars whose compile finished."""
    added = workload.arrivals_at(step)
    for request in added:
        engine.add_request(request)
    finished: dict[str, FinishedRequest] = {}
    aborted = _abort(engine, workload.aborts_at(step), finished, lambda rid: workload.abort_status(step, rid))
    grammars = dict(workload.grammars_at(step))
    if grammars:
        compile_done = _optional_method(engine, "grammar_compiled", "structured output (the workload's grammars)")
        for rid, compiled in grammars.items():
            compile_done(rid, compiled)
    return tuple(r.request_id for r in added), aborted, finished, grammars


def _abort(
    engine: Engine,
    request_ids: list[str],
    finished: dict[str, FinishedRequest],
    status_of: Callable[[str], RequestStatus] | None = None,
) -> tuple[str, ...]:
    """Abort each request (or finish it with the status `status_of` gives, `Abort.status`), adding those that were
    still unfinished to `finished`."""
    for rid in request_ids:
        status = status_of(rid) if status_of is not None else RequestStatus.FINISHED_ABORTED
        if status == RequestStatus.FINISHED_ABORTED:
            f = engine.abort_request(rid)
        else:
            why = "finishing a request from outside as other than aborted (the workload's Abort.status)"
            f = _optional_method(engine, "finish_request", why)(rid, status)
        if f is not None:
            finished[rid] = f
    return tuple(request_ids)


def _mid_step_status(workload: Workload, step: int) -> Callable[[str], RequestStatus]:
    """The statuses of `step`'s mid-step aborts (EngineCore's aborts queue), wherever the loop applies them."""
    return lambda rid: workload.abort_status(step, rid, mid_step=True)


def _batch_queue_steps(engine: Engine, workload: Workload) -> Iterator[StepRecord]:
    """vLLM's vllm/v1/engine/core.py:EngineCore.step_with_batch_queue, with a batch queue of
    `config.max_concurrent_batches`: 2 for async scheduling, pp for pipeline parallel, pp + 1 for both.

    Each step schedules if the scheduler has requests (or finished ids to
    report), and runs the fake model on that output at once; the output is
    queued. Filling the queue wins over absorbing output: while fewer than
    the queue's size are in flight and something was scheduled (or more
    could be), the step ends there. Otherwise the oldest step's output is
    absorbed. The model is deterministic, so "the future is done" never
    decides anything. Under PP without async the scheduler is the synchronous
    one: a request in flight is owed nothing until its output is back.
    """
    batch_queue: deque[tuple[int, SchedulerOutput, ModelRunnerOutput]] = deque()
    unreported: set[str] = set()
    carried: list[str] = []  # mid-step aborts of a step that absorbed no output: the input queue's copy, next step
    controls = _controls_for(engine, workload)
    for step in range(workload.max_steps):
        idle_calls = controls.when_idle(bool(unreported or carried), bool(batch_queue))
        early, _ = _apply_controls(
            controls, engine, workload, step, bool(unreported or carried), bool(batch_queue), {}, early=True
        )
        added, aborted, finished, grammars = _arrivals_and_aborts(engine, workload, step)
        idle_calls += early
        aborted += _abort(engine, carried, finished, _mid_step_status(workload, step - 1))
        carried = []
        unreported |= set(finished)
        calls, paused_aborts = _apply_controls(
            controls, engine, workload, step, bool(unreported), bool(batch_queue), finished
        )
        aborted += paused_aborts
        unreported |= set(finished)
        calls = idle_calls + calls
        before = engine.summary()
        output, model_output, scheduled, updated_step = SchedulerOutput(), ModelRunnerOutput(), False, None
        if controls.has_requests(bool(before.running), bool(before.waiting), bool(unreported)):  # has_requests()
            output, scheduled, unreported = _schedule(engine, workload, step), True, set()
            model_output = fake_model(workload, output, engine.summary())
            batch_queue.appendleft((step, output, model_output))
            after = engine.summary()
            full = len(batch_queue) >= workload.config.max_concurrent_batches
            if not full and (
                output.total_num_scheduled_tokens > 0
                or controls.has_requests(bool(after.running), bool(after.waiting), False)
            ):
                carried = workload.mid_step_aborts_at(step)  # no update in this step drains the aborts queue
                batch_queue_steps = tuple(s for s, _, _ in reversed(batch_queue))
                yield StepRecord(
                    step,
                    added,
                    aborted,
                    output,
                    model_output,
                    after,
                    finished,
                    updated_step=None,
                    in_flight=batch_queue_steps,
                    grammars=grammars,
                    throttle_prefills=workload.throttled_at(step),
                    controls=calls,
                )
                continue
        mid_step: tuple[str, ...] = ()
        if batch_queue:
            updated_step, old_output, old_model_output = batch_queue.pop()
            # EngineCore's aborts queue, before the oldest's update
            mid_step = _abort(engine, workload.mid_step_aborts_at(step), finished, _mid_step_status(workload, step))
            unreported |= {rid for rid in mid_step if rid in finished}  # the next schedule() reports them
            absorbed = engine.update_from_output(old_output, old_model_output)
            finished.update(absorbed)
            unreported |= set(absorbed)
        else:
            carried = workload.mid_step_aborts_at(step)
        record = StepRecord(
            step,
            added,
            aborted,
            output,
            model_output,
            engine.summary(),
            finished,
            updated_step=updated_step,
            scheduled=scheduled,
            in_flight=tuple(s for s, _, _ in reversed(batch_queue)),
            aborted_mid_step=mid_step,
            grammars=grammars,
            throttle_prefills=scheduled and workload.throttled_at(step),
            controls=calls,
        )
        yield record
        if not batch_queue and not unreported and not carried and drained_after(record, workload):
            return


def drained_after(record: StepRecord, workload: Workload) -> bool:
    """Nothing is live, nothing is due to arrive, and nothing is left to report after this step.

    A request that finished in this step's update_from_output is reported by
    the next schedule(), so the loop goes on for that step. Every engine's
    loop ends by this rule (the batched torch runner calls it too).
    """
    reported = all(rid in record.aborted for rid in record.finished)
    state = record.state
    return not (state.running or state.waiting) and record.step >= workload.last_event_step and reported


def trace_end(last: StepRecord | None, workload: Workload) -> str:
    """`Trace.end` from the last record alone: "drained" if the run drained with nothing in flight."""
    drained = last is not None and drained_after(last, workload) and not last.in_flight
    return "drained" if drained else "max_steps"


def run(engine: Engine, workload: Workload) -> Trace:
    records = tuple(steps(engine, workload))
    return Trace(workload, records, engine.name, trace_end(records[-1] if records else None, workload))
