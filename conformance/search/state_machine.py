"""A Hypothesis state machine over the reference: add, abort, step, and every invariant after each step.

Where the families draw a whole workload up front, this machine lets
Hypothesis pick the next event from the state it has reached: a request
arrives, a live or finished request is aborted, or the engine steps.

* The model is the engine loop's own `fake_model`: `[]` for a partial prefill
  chunk, else the request's next planted token, chosen by Hypothesis when the
  request arrives from a tiny vocabulary where EOS and stop tokens are common.
  That is the same freedom as choosing each token at the step (a request
  samples output index i once, even across preemptions), but every rule draws
  a fixed shape: drawn at the step, the number of draws followed who got
  scheduled, and 90% of the shrinker's attempts were misaligned. For the same
  reason a range that depends on an earlier draw is drawn fixed and scaled.
* The pure API gives the state `schedule()` starts from (arrivals and aborts
  applied) and the state after `update_from_output()`; each step's `StepView`
  is built from both. Every catalogue predicate is an `@invariant`, and so are
  the two trace checks of `monitor.py`, run on the `Trace` the machine keeps.
* Each check raises its own `Counterexample` subclass: Hypothesis tells bugs
  apart by exception type and raise site, so it never shrinks one invariant's
  failure into another's. An `AssertionError` from inside the reference
  (vLLM's own asserts) is the kind "assertion".
* With `Bounds(features=True)` a run may turn on prefix caching, spec
  decode (the engine loop's `Drafter` plays the drawn proposals) and async
  scheduling with a batch queue of 2 (vLLM with PP = 1, as the engine loop)
  or 3 (a two-stage pipeline, where a preempted request's output can still
  be in flight at the next schedule()).
* A run is a workload that `simulate()` replays (an async run with a queue
  of 3 replays only as its program: the engine loop's queue is 2). Sizes and times travel
  through a side channel (`RunLog`): each machine instance logs itself there,
  and the last one Hypothesis builds replays the shrunk failing example.
  Running a hunt over the machine (settings, budget, the finding) is
  `state_machine_kill.py`.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import ClassVar

from hypothesis import strategies as st, target
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ...reference_impl import api
from ...spec.config import SchedulerConfig
from ...spec.engine import Drafter, fake_model
from ...spec.invariants import monitor
from ...spec.invariants.build import view_from_states
from ...spec.invariants.catalogue import INVARIANTS, Invariant
from ...spec.invariants.views import StepView
from ...spec.output import ModelRunnerOutput, SchedulerOutput
from ...spec.request import RequestStatus
from ...spec.state import SchedulerState
from ...spec.trace import FinishedRequest, StateSummary, StepRecord, Trace
from ...spec.workload import Abort, Workload, WorkloadRequest
from .state_machine_draws import FILLER, Bounds, batch_queue_size, make_config, make_request, raw_draws

TRACE_CHECKS = ("finished-reported-once", "stop-is-final")  # monitor.py's checks over the whole trace
STALE_TARGET = "stale outputs waiting, squared"
TARGETS = (  # what Hypothesis `target()`s at teardown: the search steers toward more of each
    "preemptions among several running",
    "victims ahead of a scheduled request",
    "KV blocks in use, summed over steps",
)


class Counterexample(AssertionError):
    """A check failed. `Counterexample.of(kind)` is the subclass for one invariant, trace check, or "assertion"."""

    kind = "?"
    _kinds: ClassVar[dict[str, type[Counterexample]]] = {}

    @classmethod
    def of(cls, kind: str) -> type[Counterexample]:
        if kind not in cls._kinds:
            cls._kinds[kind] = type(f"Violated[{kind}]", (cls,), {"kind": kind})
        return cls._kinds[kind]


class OutOfTime(KeyboardInterrupt):
    """Raised before any failure once the hunt's safety cap is spent; the hunt then raises `SearchCut`.
    Hypothesis has no wall-clock limit, and an interrupt is the one exception it passes through untouched
    (any other is a failure, or 'flaky')."""


@dataclass
class Run:
    """One example as executed: its size, a readable program, and a replayable workload."""

    config: SchedulerConfig | None = None
    requests: list[WorkloadRequest] = field(default_factory=list)
    aborts: list[Abort] = field(default_factory=list)
    steps: int = 0
    program: list[str] = field(default_factory=list)

    def workload(self) -> Workload:
        """The run as a workload. One step more than it ran, so that what finished in its last step is
        reported: cut at max_steps right there, the engine loop would call the trace drained with a report due."""
        assert self.config is not None, "a run is a workload once SchedulerMachine.configure has drawn its config"
        return Workload(
            self.config,
            tuple(self.requests),
            tuple(self.aborts),
            name="state-machine",
            max_steps=self.steps + 1,
            filler_token_id=FILLER,
        )


@dataclass
class RunLog:
    """The side channel: the latest run, when the hunt started and first failed, its safety cap and its filter."""

    current: Run = field(default_factory=Run)
    started: float = field(default_factory=time.perf_counter)
    first_failure: float | None = None
    deadline: float | None = None  # the safety cap: past it, the search is cut short (unknown, never survived)
    examples: int = 0  # machines built so far: the examples run, and after a failure the shrinker's tries
    examples_to_failure: int = 0  # examples run up to and including the first failing one
    expect: frozenset[str] | None = None  # when set, other invariants are not failures (vLLM's asserts always are)

    def note_failure(self) -> None:
        if self.first_failure is None:
            self.first_failure, self.examples_to_failure = time.perf_counter(), self.examples


class SchedulerMachine(RuleBasedStateMachine):
    bounds = Bounds()
    log = RunLog()

    def __init__(self) -> None:
        super().__init__()
        log = type(self).log
        if log.deadline is not None and log.first_failure is None and time.perf_counter() > log.deadline:
            raise OutOfTime()
        log.examples += 1
        self.run = log.current = Run()
        self.state: SchedulerState  # set by `configure`, which Hypothesis runs before any rule
        self.view: StepView | None = None  # the last step's; None until a step, and again after an add or abort
        self.records: list[StepRecord] = []
        self.pending: tuple[list[str], list[str], dict[str, FinishedRequest]] = ([], [], {})
        self.trace_violations: list[monitor.Violation] | None = None
        self.queue_size = 1  # the batch queue: 1 for the synchronous engine, where nothing stays in flight
        self.in_flight: deque[tuple[int, SchedulerOutput, ModelRunnerOutput]] = deque()
        self.drafter: Drafter  # set by `configure`
        self.targets: dict[str, float] = dict.fromkeys(TARGETS, 0.0)

    @property
    def config(self) -> SchedulerConfig:
        """The run's config: `configure` draws it, and Hypothesis runs it before any rule."""
        assert self.run.config is not None
        return self.run.config

    def _fail(self, kind: str, detail: str, cause: BaseException | None = None) -> None:
        log = type(self).log
        if log.expect is None or kind in log.expect or cause is not None:
            log.note_failure()
            raise Counterexample.of(kind)(f"step {self.run.steps - 1}: {kind}: {detail}") from cause

    def _call(self, fn, *args):
        """vLLM's asserts, kept in the reference, are its built-in monitors: a failing one is a counterexample."""
        try:
            return fn(*args)
        except AssertionError as e:
            self._fail("assertion", f"{fn.__name__}: {e}", e)
        except Exception:
            type(self).log.note_failure()
            raise

    @initialize(data=st.data(), initial=st.integers(0, 3))
    def configure(self, data: st.DataObject, initial: int) -> None:
        """A config, and a few requests already waiting (for runs where swarm testing disables add_request)."""
        raw = data.draw(raw_draws(self.bounds)[0], label="config")
        self.run.config = make_config(raw, self.bounds)
        self.queue_size = batch_queue_size(raw, self.bounds)
        self.drafter = Drafter(self.run.workload())
        self.state = api.initial_state(self.run.config)
        self.run.program.append(repr(self.run.config))
        for _ in range(initial):
            self.add_request(data)

    def between_steps(self) -> bool:
        return len(self.pending[0]) + len(self.pending[1]) < self.bounds.max_events_between_steps

    @precondition(lambda self: self.between_steps())
    @rule(data=st.data())
    def add_request(self, data: st.DataObject) -> None:
        raw = data.draw(raw_draws(self.bounds)[1], label="request")
        r = make_request(raw, self.config, self.bounds, len(self.run.requests), self.run.steps)
        self.state = self._call(api.add_request, self.state, r.request)
        self.run.requests.append(r)
        self.pending[0].append(r.request_id)
        self.run.program.append(f"add {r.request} sampling {list(r.output_token_ids)} at step {self.run.steps}")
        self.view = None

    @precondition(lambda self: self.run.requests and self.between_steps())
    @rule(index=st.integers(0, 15))
    def abort(self, index: int) -> None:
        rid = self.run.requests[index % len(self.run.requests)].request_id  # modulo: stable while shrinking
        live = self.state.requests.get(rid)
        self.state = self._call(api.abort, self.state, [rid])
        self.run.aborts.append(Abort(self.run.steps, rid))
        self.pending[1].append(rid)
        if live is not None:
            self.pending[2][rid] = FinishedRequest(RequestStatus.FINISHED_ABORTED, live.output_token_ids)
        self.run.program.append(f"abort {rid} before step {self.run.steps}")
        self.view = None

    @rule()
    def step(self) -> None:
        """One engine step: `spec.engine.steps`'s synchronous loop (drafts proposed after the update), or under
        async scheduling vLLM's `step_with_batch_queue` with the drawn queue size: schedule if there is anything
        to, and absorb the oldest output once the queue is full, or once nothing more is coming."""
        pre, step = self.state, self.run.steps
        self.run.steps += 1
        out, model_output, mid, scheduled = SchedulerOutput(), ModelRunnerOutput(), pre, False
        if self.queue_size == 1 or pre.running or pre.waiting or pre.finished_req_ids:  # Scheduler.has_requests()
            out, mid = self._call(api.schedule, pre)
            model_output, scheduled = fake_model(self.run.workload(), out, StateSummary.of(mid)), True
            self.note_coverage(pre, out, mid)
        post, finished, updated, absorbed, drafts = mid, {}, None, None, {}
        if self.queue_size == 1:
            updated, absorbed = step, model_output
            post, finished = self._call(api.update_from_output, mid, out, model_output)
            post, drafts = self._drafts(out, model_output, post)
        else:
            if scheduled:
                self.in_flight.appendleft((step, out, model_output))
            more = out.total_num_scheduled_tokens > 0 or mid.running or mid.waiting
            if self.in_flight and (len(self.in_flight) >= self.queue_size or not (scheduled and more)):
                updated, old_out, absorbed = self.in_flight.pop()
                post, finished = self._call(api.update_from_output, mid, old_out, absorbed)
        self.run.program.append(
            f"step {step}: scheduled {dict(out.num_scheduled_tokens)}, preempted "
            f"{sorted(out.preempted_req_ids)}, sampled {dict(model_output.sampled_token_ids)}"
            + (f", absorbed step {updated}" if updated not in (None, step) else "")
            + (f", drafts {drafts}" if drafts else "")
        )
        self.state = post
        self.view = view_from_states(pre, out, post, model_output=absorbed, finished=finished)
        added, aborted, finished_by_abort = self.pending
        self.records.append(
            StepRecord(
                step,
                tuple(added),
                tuple(aborted),
                out,
                model_output,
                StateSummary.of(post),
                {**finished_by_abort, **finished},
                updated_step=updated,
                draft_token_ids=drafts,
                scheduled=scheduled,
                in_flight=tuple(s for s, _, _ in reversed(self.in_flight)),
            )
        )
        self.pending = ([], [], {})
        self.trace_violations = None

    def _drafts(self, out: SchedulerOutput, model_output: ModelRunnerOutput, post):
        """Sync spec decode: the drafter's proposals, set after the update
        (`vllm/v1/engine/core.py:EngineCore.post_step`)."""
        if self.config.num_speculative_tokens == 0 or out.total_num_scheduled_tokens == 0:
            return post, {}
        self.drafter.workload = self.run.workload()  # the drafter reads the requests that have arrived so far
        drafts = self.drafter.propose(out, model_output, StateSummary.of(post))
        if not drafts:
            return post, {}

        def update_draft_token_ids(state):
            scheduler = api.thaw(state)
            scheduler.update_draft_token_ids(drafts)
            return api.freeze(scheduler)

        return self._call(update_draft_token_ids, post), drafts

    def check_trace(self, name: str) -> None:
        if self.view is None:
            return
        if self.trace_violations is None:  # the monitors' own trace-level code
            s = self.state  # drained as the engine loop means it: nothing queued, no report outstanding
            end = "max_steps" if s.running or s.waiting or s.finished_req_ids or self.in_flight else "drained"
            self.trace_violations = list(
                monitor.trace_violations(Trace(self.run.workload(), tuple(self.records), "reference", end))
            )
        for v in self.trace_violations:
            if v.invariant == name:
                self._fail(name, v.detail)

    def note_coverage(self, pre, out, mid) -> None:
        """What `target()` steers towards: contention, not a lone request preempting itself over and over."""
        if len(pre.running) > 1:
            self.targets["preemptions among several running"] += len(out.preempted_req_ids)
        # A victim ahead of a request scheduled in the same step: PRIORITY's refund path (bug-zoo Z1).
        last = max((pre.running.index(rid) for rid in out.num_scheduled_tokens if rid in pre.running), default=-1)
        self.targets["victims ahead of a scheduled request"] += sum(
            pre.running.index(rid) < last for rid in out.preempted_req_ids if rid in pre.running
        )
        self.targets["KV blocks in use, summed over steps"] += 1 - mid.num_free_blocks / self.config.num_usable_blocks
        if self.bounds.features:  # waiting requests whose output is still in flight: the stale skip, in pairs (Z5)
            stale = sum(pre.requests[rid].num_stale_output_tokens > 0 for rid in pre.waiting)
            self.targets[STALE_TARGET] = self.targets.get(STALE_TARGET, 0.0) + stale * stale

    def teardown(self) -> None:
        if self.run.config is not None:
            for label, score in self.targets.items():
                target(float(score), label=label)


def _as_invariant(name: str, check) -> None:
    check.__name__ = check.__qualname__ = name  # Hypothesis runs invariants in name order
    setattr(SchedulerMachine, name, invariant()(check))


def _catalogue_check(inv: Invariant):
    def check(self: SchedulerMachine) -> None:
        if self.view is not None and not inv.holds(self.view):
            problem = self.view.ids_problem if inv.name == "block-conservation" else ""
            self._fail(inv.name, problem or inv.sentence)

    return check


for _i, _inv in enumerate(INVARIANTS):  # the catalogue's order, then the trace checks
    _as_invariant(f"catalogue_{_i:02d}_{_inv.name.replace('-', '_')}", _catalogue_check(_inv))
for _name in TRACE_CHECKS:
    _as_invariant(f"trace_{_name.replace('-', '_')}", lambda self, _n=_name: self.check_trace(_n))
