"""A Hypothesis state machine that drives any engine in lock-step with the reference (`schedspec hunt`).

The rules and draws are the reference machine's (`state_machine.py`,
`state_machine_draws.py`): a config, requests that arrive, aborts, steps.
What differs is what a step does. Both engines, the reference and the engine
under test, are driven by the one engine loop every engine runs under
(`spec.engine.steps`), one step per `step` rule, and after every step:

* their step records are compared at the chosen level (`compare.py`), as
  the differ compares them;
* every invariant monitor (`spec/invariants/monitor.py`) judges the engine's
  own trace so far.

The loop reads the workload as the rules grow it (`GrowingWorkload`): a step
sees the requests and aborts drawn before it, and the run never drains
before the machine stops. A run is then a workload (`Run.workload`) that
`diff`, `certify` and `schedspec replay` run the same way. Async runs use
the engine loop's batch queue of 2, so every run replays.

A failure raises a `Counterexample` subclass per kind (the diverging field,
the invariant, or "crash" when the engine raised), so Hypothesis never
shrinks one kind into another. An engine that fails as a program (no start,
a dead process, a hang past the step timeout, a malformed answer) is no
finding: `EngineBroke` stops the hunt untouched, and the command exits 3.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

from hypothesis import strategies as st, target
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from ...reference_impl import ReferenceEngine
from ...spec.engine import EngineFactory, steps, trace_end
from ...spec.invariants.monitor import Monitor
from ...spec.invariants.replay import TraceReplay
from ...spec.trace import StepRecord, Trace
from ...spec.versions import known_violation
from ...spec.workload import Abort, Workload
from ..harness.compare import first_difference
from ..harness.differ import EngineCrash, EngineError, StepFailed, next_record, start_engine
from .state_machine import Counterexample, OutOfTime, Run, RunLog
from .state_machine_draws import Bounds, make_config, make_request, raw_draws

ENDLESS = 10**9  # the growing workload's max_steps and last event: the machine, not the loop, ends a run


class EngineBroke(KeyboardInterrupt):
    """An engine failed as a program: the hunt stops at once, unshrunk (Hypothesis passes interrupts through)."""

    def __init__(self, error: EngineError) -> None:
        super().__init__(str(error))
        self.error = error


class GrowingWorkload:
    """The workload drawn so far, as the engine loop reads it, looked up when a step needs it."""

    max_steps = ENDLESS
    last_event_step = ENDLESS

    def __init__(self, run: Run) -> None:
        self.run = run
        self.current = run.workload()

    def refresh(self) -> None:
        self.current = self.run.workload()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.current, name)


@dataclass
class LockstepLog(RunLog):
    """The reference machine's side channel, plus the engines to close and the last divergence seen."""

    open_engines: list[Any] = field(default_factory=list)
    divergence: tuple[int, str, Any, Any] | None = None  # (step, field, a, b) of the failing run
    on_example: Callable[[int], None] | None = None  # told the count of examples begun, for progress lines


class LockstepMachine(RuleBasedStateMachine):
    bounds = Bounds(features=True, batch_queue_sizes=(2,))
    log: ClassVar[LockstepLog] = LockstepLog()
    engine_name: ClassVar[str] = "reference"
    factory: ClassVar[EngineFactory] = ReferenceEngine
    level: ClassVar[str] = "blocks"
    step_timeout_s: ClassVar[float | None] = 30.0
    start_timeout_s: ClassVar[float | None] = 300.0

    def __init__(self) -> None:
        super().__init__()
        log = type(self).log
        if log.deadline is not None and log.first_failure is None and _now() > log.deadline:
            raise OutOfTime()
        log.examples += 1
        if log.on_example is not None and log.first_failure is None:  # the search's examples, not the shrinker's
            log.on_example(log.examples)
        self.run = log.current = Run()
        self.engines: list[Any] = []
        self.loops: list[Any] = []
        self.records: list[list[StepRecord]] = [[], []]
        self.monitor: tuple[TraceReplay, Monitor] | None = None  # engine b's, rebuilt when a request is added
        self.growing: GrowingWorkload

    # ---- rules -------------------------------------------------------------------------------------

    @initialize(data=st.data(), initial=st.integers(0, 3))
    def configure(self, data: st.DataObject, initial: int) -> None:
        raw = data.draw(raw_draws(self.bounds)[0], label="config")
        config = make_config(raw, self.bounds)
        self.run.config = config
        self.run.program.append(repr(config))
        self.growing = GrowingWorkload(self.run)
        cls = type(self)
        for side, make, name in (("a", ReferenceEngine, "reference"), ("b", cls.factory, cls.engine_name)):
            try:
                engine = start_engine(make, config, name, cls.start_timeout_s)
            except StepFailed as e:
                raise EngineBroke(EngineError(side, name, "start", None, e.cause)) from None
            self.engines.append(engine)
            cls.log.open_engines.append(engine)
            self.loops.append(steps(engine, cast(Workload, self.growing)))
        for _ in range(initial):
            self.add_request(data)

    def between_steps(self) -> bool:
        now = self.run.steps
        events = sum(r.arrival_step == now for r in self.run.requests) + sum(a.step == now for a in self.run.aborts)
        return events < self.bounds.max_events_between_steps

    @precondition(lambda self: self.between_steps())
    @rule(data=st.data())
    def add_request(self, data: st.DataObject) -> None:
        raw = data.draw(raw_draws(self.bounds)[1], label="request")
        assert self.run.config is not None
        r = make_request(raw, self.run.config, self.bounds, len(self.run.requests), self.run.steps)
        self.run.requests.append(r)
        self.growing.refresh()
        self.monitor = None  # the monitors index the workload's requests when they start
        self.run.program.append(f"add {r.request} sampling {list(r.output_token_ids)} at step {self.run.steps}")

    @precondition(lambda self: self.run.requests and self.between_steps())
    @rule(index=st.integers(0, 15))
    def abort(self, index: int) -> None:
        rid = self.run.requests[index % len(self.run.requests)].request_id  # modulo: stable while shrinking
        self.run.aborts.append(Abort(self.run.steps, rid))
        self.growing.refresh()
        self.run.program.append(f"abort {rid} before step {self.run.steps}")

    def loop_goes_on(self) -> bool:
        """Whether the engine loop would run another step of the run as a workload: only steps a replay runs too.

        The loop ends a run once it drains with no event left (`spec.engine.trace_end`); a step after that point
        would never replay. So a drained run takes another step only if something arrives or is aborted first.
        """
        if not self.records[0]:
            return True
        now = self.run.steps
        if any(r.arrival_step == now for r in self.run.requests) or any(a.step == now for a in self.run.aborts):
            return True
        return trace_end(self.records[0][-1], self.growing.current) != "drained"

    @precondition(lambda self: self.loop_goes_on())
    @rule()
    def step(self) -> None:
        step = self.run.steps
        self.run.steps += 1
        cls = type(self)
        got: list[StepRecord] = []
        for i, (side, name) in enumerate((("a", "reference"), ("b", cls.engine_name))):
            try:
                rec = next_record(self.loops[i], name, step, cls.step_timeout_s)
            except StepFailed as e:
                raise EngineBroke(EngineError(side, name, e.kind, step, e.cause)) from None
            except EngineCrash as e:
                self._fail(step, "crash" if side == "b" else "oracle crash", None, str(e))
            if rec is None:
                self._fail(step, "trace length", "continues", "ended")
            assert rec is not None
            got.append(rec)
            self.records[i].append(rec)
        ra, rb = got
        self.run.program.append(
            f"step {step}: scheduled {dict(rb.output.num_scheduled_tokens)}, preempted "
            f"{sorted(rb.output.preempted_req_ids)}, sampled {dict(rb.model_output.sampled_token_ids)}"
        )
        try:
            d = first_difference(ra, rb, cls.level)
        except Exception as e:  # noqa: BLE001 - a record that cannot even be compared is malformed
            raise EngineBroke(
                EngineError("b", cls.engine_name, "malformed", step, f"the step record cannot be compared: {e}")
            ) from None
        if d is not None:
            self._fail(step, d.field.split("[")[0], d.a, d.b)
        self._monitor_step(step)

    # ---- checks ------------------------------------------------------------------------------------

    def _monitor_step(self, step: int) -> None:
        """Every invariant on engine b's trace so far; the monitors restart (and catch up) after an arrival."""
        records = self.records[1]
        if self.monitor is None:
            trace = Trace(self.growing.current, (), type(self).engine_name, "max_steps")
            self.monitor = TraceReplay(trace), Monitor(self.growing.current)
            todo = records
        else:
            todo = records[-1:]
        replay, monitor = self.monitor
        for rec in todo:
            monitor.step(replay.step(rec), rec)
        found = {**monitor.found, **monitor.history_found}
        release = self.growing.current.config.vllm_version
        found = {k: v for k, v in found.items() if known_violation(k, release) is None}
        if found:
            v = min(found.values(), key=lambda v: v.step)
            self._fail(step, v.invariant, None, v.detail, invariant=True)

    def _fail(self, step: int, kind: str, a: Any, b: Any, invariant: bool = False) -> None:
        log = type(self).log
        log.note_failure()
        log.divergence = (step, ("invariant " if invariant else "") + kind, a, b)
        raise Counterexample.of(kind)(f"step {step}: {kind}: a={a!r} b={b!r}")

    def teardown(self) -> None:
        for engine in self.engines:
            close_quietly(engine)
            if engine in type(self).log.open_engines:
                type(self).log.open_engines.remove(engine)
        config = self.run.config
        if self.records[0] and config is not None:  # steer towards contention: preemptions, a full cache and budget
            records = self.records[0]
            target(float(sum(len(r.output.preempted_req_ids) for r in records)), label="preemptions")
            usable = max(config.num_usable_blocks, 1)
            used = sum(1 - r.state.num_free_blocks / usable for r in records)
            target(float(used), label="KV blocks in use, summed over steps")
            # A step whose budget ran short with requests still waiting: where chunking, or its absence, decides.
            short = sum(
                bool(r.state.waiting) and r.output.total_num_scheduled_tokens > config.max_num_batched_tokens // 2
                for r in records
            )
            target(float(short), label="steps with half the budget spent and requests left waiting")


def close_quietly(engine: Any) -> None:
    close = getattr(engine, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # noqa: BLE001 - closing a broken engine must not mask the finding
            pass


def _now() -> float:
    import time

    return time.perf_counter()
