"""Step records from a live scheduler's calls: the events of vLLM's engine loop, cut into the spec's steps.

Design notes
------------
* A monitored scheduler sees calls, not steps: `add_request` and
  `finish_requests` (A), `schedule()` (S), `update_from_output()` (U) and
  `update_draft_token_ids()` (D). The spec's `StepRecord` is what one turn of
  vLLM's engine loop does (spec/engine.py): A* S A* U D? synchronously (an A between S and U is a mid-step abort:
  EngineCore drains its aborts queue there), and
  under async scheduling (`step_with_batch_queue`) A* S (the batch queue not
  full yet), A* S U (full: the oldest output absorbed) or A* U (nothing to
  schedule). So a record closes when the next event cannot belong to it: an
  A after S, U or D; an S after S or U; a U after U. A U right after an S
  joins it, as the harness's loop does when the queue is full.
* The state summary is read when the record closes, from the scheduler as it
  stands before the next call changes it (an `add_request` changes
  `scheduler.requests`), so each record pays for one summary.
* Under async scheduling a step's sampled tokens arrive with a later
  update, and the replay needs them in the step's own record (the harness's
  fake model answers at once). So closed records wait, in order, until the
  output of each has been absorbed: at most the batch queue's depth of
  records, so memory stays bounded. An output that scheduled nothing needs
  no answer (the driver may never absorb it; vLLM's own async tests drop
  them), and is dropped from the in-flight list when a later one is absorbed.
* Light records (sampled monitoring, `full`): a record no judged step needs
  is assembled without the conversions that cost O(N) (the output's
  requests, the sampled tokens, the summary). It keeps what the trace-wide
  checks and the batch queue read: the ids scheduled, preempted, finished
  and aborted. The converters come as thunks, so a light record never runs
  them.
* Record numbers are the records' own (what `StepRecord.step`,
  `updated_step` and `in_flight` refer to); `schedule_calls` is the capture's
  step, for messages that name a step a reader can find.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..spec.controls import ControlCall
from ..spec.output import ModelRunnerOutput, SchedulerOutput
from ..spec.trace import FinishedRequest, StateSummary, StepRecord


@dataclass
class _Open:
    step: int
    schedule_call: int
    added: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    aborted_mid_step: list[str] = field(default_factory=list)  # after the schedule, before the update
    finished: dict[str, FinishedRequest] = field(default_factory=dict)
    output: SchedulerOutput = field(default_factory=SchedulerOutput)
    own: ModelRunnerOutput | None = None  # this step's sampled tokens, once known
    scheduled: bool = False
    updated: bool = False
    updated_step: int | None = None
    drafts: dict[str, tuple[int, ...]] = field(default_factory=dict)
    grammars: dict[str, bool] = field(default_factory=dict)  # compiles its schedule() found done
    throttled: bool = False  # its schedule() had throttle_prefills=True
    controls: list[ControlCall] = field(default_factory=list)  # reset_prefix_cache and set_pause_state calls
    state: StateSummary | None = None
    in_flight: tuple[int, ...] = ()
    last: str = ""  # the last event: "A", "S", "U" or "D"


class StepAssembler:
    """Fed the calls in order; hands each complete `StepRecord` (and its schedule call) to `emit`, in order."""

    def __init__(
        self,
        batch_queue: bool,  # the engine loop keeps steps in flight (async scheduling or pipeline parallel)
        summary: Callable[[int], StateSummary],  # called with the closing record's step
        emit: Callable[[StepRecord, int], None],
        full: Callable[[int], bool] = lambda step: True,
    ) -> None:
        self.batch_queue = batch_queue
        self.summary, self.emit, self.full = summary, emit, full
        self.next_step = 0
        self.schedule_calls = 0
        self.current: _Open | None = None
        self.waiting: deque[_Open] = deque()  # closed, waiting for their own sampled tokens
        self.flight: list[tuple[int, Any, _Open]] = []  # (step, vLLM output object, record), oldest first

    def prepare(self, event: str) -> None:
        """Called before vLLM's method runs: close the open record if `event` cannot join it, reading the
        state before the call changes it."""
        cur = self.current
        if cur is not None and (
            (event == "A" and cur.last in ("S", "U", "D") and not self.mid_step(cur))
            or (event == "S" and (cur.scheduled or cur.updated))
            or (event == "U" and cur.updated)
        ):
            self.close()

    def mid_step(self, cur: _Open) -> bool:
        """Whether an abort now lands between the open record's schedule and its update (`Abort.mid_step`).

        EngineCore drains its aborts queue after the model ran, right before an update
        (vllm/v1/engine/core.py:EngineCore.step). Synchronously every schedule is followed by its update, so an
        abort between them is mid-step.
        """
        # Async: an abort after a schedule cannot be placed until the next call (an update: mid-step; a schedule:
        # the next step's, as vLLM's own tests order them). The record closes at the abort instead, which the
        # monitors judge alike: the update passes the aborted request over either way.
        return cur.scheduled and not cur.updated and not self.batch_queue

    def _open(self, event: str) -> _Open:
        self.prepare(event)  # a caller that did not prepare still gets the record cut right
        if self.current is None:
            self.current = _Open(self.next_step, self.schedule_calls)
            self.next_step += 1
        self.current.last = event
        return self.current

    def add(self, rid: str) -> None:
        self._open("A").added.append(rid)

    def abort(self, rids: list[str], finished: Mapping[str, FinishedRequest]) -> None:
        rec = self._open("A")
        (rec.aborted_mid_step if self.mid_step(rec) else rec.aborted).extend(rids)
        rec.finished.update(finished)

    def control(self, call: ControlCall) -> bool:
        """A call outside schedule() (`spec.controls`): an input of the next step, as arrivals and aborts are. The
        engine core makes it between steps, never between a schedule and its update, so it closes the open record
        (a mid-step abort would not). False if it cannot be placed: a synchronous schedule still awaits its update."""
        cur = self.current
        if cur is not None and cur.last in ("S", "U", "D"):
            if cur.scheduled and not cur.updated and not self.batch_queue and cur.own is None:
                return False
            self.close()
        self._open("A").controls.append(call)
        return True

    def abort_follows_reset(self) -> bool:
        """Whether the open record has a reset with the running requests after some of its aborts: another abort
        now would fall between them, which a record cannot order (its aborts come before such a reset)."""
        cur = self.current
        return cur is not None and any(
            c.call == "reset_prefix_cache" and c.reset_running_requests and not c.before_inputs for c in cur.controls
        )

    def schedule(
        self,
        key: Any,
        output: Callable[[], SchedulerOutput],
        light: Callable[[], SchedulerOutput] | None = None,
        grammars: Mapping[str, bool] | None = None,
        throttled: bool = False,
    ) -> None:
        rec = self._open("S")
        rec.grammars.update(grammars or {})
        rec.throttled = throttled
        rec.output = output() if light is None or self.full(rec.step) else light()
        rec.scheduled = True
        rec.schedule_call = self.schedule_calls
        self.schedule_calls += 1
        if not rec.output.num_scheduled_tokens:
            rec.own = ModelRunnerOutput()
        self.flight.append((rec.step, key, rec))

    def update(
        self, key: Any, sampled: Callable[[], ModelRunnerOutput], finished: Mapping[str, FinishedRequest]
    ) -> None:
        rec = self._open("U")
        rec.updated = True
        at = next((i for i, (_, k, _) in enumerate(self.flight) if k is key), None)
        if at is not None:
            for _, _, skipped in self.flight[:at]:  # older outputs that scheduled nothing, never absorbed
                if skipped.own is None:
                    skipped.own = ModelRunnerOutput()
            step, _, owner = self.flight[at]
            self.flight = self.flight[at + 1 :]
            owner.own = sampled() if self.full(step) else ModelRunnerOutput()
            rec.updated_step = step
        rec.finished.update(finished)
        if not self.batch_queue and not rec.scheduled:
            rec.updated_step = None
        self._drain()

    def drafts(self, drafts: Mapping[str, tuple[int, ...]]) -> None:
        rec = self._open("D")
        rec.drafts.update(drafts)

    def shutdown(self) -> None:
        """The scheduler shuts down: a record that only gathered arrivals or aborts was never a step of the
        engine (it stops between `add_request` and the next `schedule()`), so it is dropped, not judged."""
        cur = self.current
        if cur is not None and not cur.scheduled and not cur.updated and not cur.drafts:
            self.current = None
            return
        self.close()

    def close(self) -> None:
        """Close the open record: read the state now, before the next call changes it."""
        rec, self.current = self.current, None
        if rec is None:
            return
        rec.state = self.summary(rec.step) if self.full(rec.step) else StateSummary()
        rec.in_flight = tuple(s for s, _, _ in self.flight) if self.batch_queue else ()
        if not rec.scheduled:
            rec.own = ModelRunnerOutput()
        self.waiting.append(rec)
        self._drain()

    def _drain(self) -> None:
        while self.waiting and self.waiting[0].own is not None:
            rec = self.waiting.popleft()
            assert rec.state is not None and rec.own is not None
            record = StepRecord(
                rec.step,
                tuple(rec.added),
                tuple(rec.aborted),
                rec.output,
                rec.own,
                rec.state,
                dict(rec.finished),
                updated_step=rec.updated_step if self.batch_queue or rec.updated else rec.step,
                draft_token_ids=dict(rec.drafts),
                scheduled=rec.scheduled if self.batch_queue else True,
                in_flight=rec.in_flight,
                aborted_mid_step=tuple(rec.aborted_mid_step),
                grammars=dict(rec.grammars),
                throttle_prefills=rec.throttled,
                controls=tuple(rec.controls),
            )
            self.emit(record, rec.schedule_call)
