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
* A run is a workload that `simulate()` replays. Sizes and times travel
  through a side channel (`RunLog`): each machine instance logs itself there,
  and the last one Hypothesis builds replays the shrunk failing example.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import lru_cache

from hypothesis import HealthCheck, Phase, Verbosity, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from ..reference_impl import api
from ..spec.arith import cdiv
from ..spec.config import SchedulerConfig
from ..spec.engine import fake_model
from ..spec.invariants import monitor
from ..spec.invariants.build import view_from_states
from ..spec.invariants.catalogue import INVARIANTS, Invariant
from ..spec.request import Request, RequestStatus
from ..spec.trace import FinishedRequest, StateSummary, StepRecord, Trace
from ..spec.workload import Abort, Workload, WorkloadRequest
from .hunt import Finding
from .mutants import Mutant, applied

EOS, STOP_TOKENS, FILLER = 2, (5, 6), 7
# Plain tokens first (Hypothesis shrinks towards the front), five of them to three that may stop:
# stops are common, yet requests live long enough to crowd the cache.
VOCAB = (FILLER, 8, 9, 10, 11, EOS, *STOP_TOKENS)
TRACE_CHECKS = ("finished-reported-once", "stop-is-final")  # monitor.py's checks over the whole trace
COVERAGE = ("preemptions among several running", "victims ahead of a scheduled request",
            "KV blocks in use, summed over steps")


@dataclass(frozen=True)
class Bounds:
    """How big a drawn world may get. Small on purpose: a few blocks make preemption routine."""

    max_model_len: tuple[int, int] = (4, 16)
    block_sizes: tuple[int, ...] = (2, 1, 4, 8)
    # Usable blocks hold between one and this many max_model_len sequences. vLLM refuses to start unless
    # one fits (kv_cache_planning.py:151-183); with fewer, a long request only livelocks.
    max_sequences_in_cache: int = 2
    max_num_seqs: int = 5
    max_tokens: int = 40
    max_planted: int = 12  # planted samples per request; the filler token follows
    max_priority: int = 3
    # Arrivals and aborts between two steps. Hypothesis's swarm testing disables `step` in about half of all
    # runs; the cap turns such a run into a short invalid one instead of thirty arrivals nobody schedules.
    max_events_between_steps: int = 4


class Counterexample(AssertionError):
    """A check failed. `Counterexample.of(kind)` is the subclass for one invariant, trace check, or "assertion"."""

    kind, _kinds = "?", {}

    @classmethod
    def of(cls, kind: str) -> type["Counterexample"]:
        if kind not in cls._kinds:
            cls._kinds[kind] = type(f"Violated[{kind}]", (cls,), {"kind": kind})
        return cls._kinds[kind]


class OutOfTime(KeyboardInterrupt):
    """Raised before any failure once the hunt's budget is spent. Hypothesis has no wall-clock limit, and an
    interrupt is the one exception it passes through untouched (any other is a failure, or 'flaky')."""


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
        return Workload(self.config, tuple(self.requests), tuple(self.aborts), name="state-machine",
                        max_steps=self.steps + 1, filler_token_id=FILLER)


@dataclass
class RunLog:
    """The side channel: the latest run, when the hunt started and first failed, its deadline and its filter."""

    current: Run = field(default_factory=Run)
    started: float = field(default_factory=time.perf_counter)
    first_failure: float | None = None
    deadline: float | None = None
    expect: frozenset[str] | None = None  # when set, other invariants are not failures (vLLM's asserts always are)


def _scaled(value: int, n_max: int, n: int) -> int:
    """`value`, drawn in 0..n_max, scaled to 0..n: a drawn range never depends on an earlier draw."""
    return value * n // max(n_max, 1)


@lru_cache(maxsize=None)
def _raw(b: Bounds) -> tuple[st.SearchStrategy, st.SearchStrategy]:
    """Fixed-shape strategies, built once per bounds (building them per draw cost more than the reference)."""
    l_hi, big = b.max_model_len[1], 4 * b.max_model_len[1]
    config = st.tuples(st.integers(*b.max_model_len), st.sampled_from(b.block_sizes), st.integers(1, b.max_num_seqs),
                       st.booleans(), st.integers(0, big), st.integers(0, big), st.booleans(), st.integers(0, l_hi),
                       st.booleans(), st.integers(1, b.max_num_seqs), st.booleans(),
                       st.sampled_from(("fcfs", "priority")), st.sampled_from((0.0, 0.1, 0.3)), st.booleans())
    request = st.tuples(st.integers(0, l_hi), st.integers(1, b.max_tokens), st.integers(0, b.max_tokens),
                        st.integers(0, b.max_priority), st.integers(0, 2 * b.max_priority),
                        st.sampled_from((EOS, None)), st.booleans(), st.sampled_from(((), STOP_TOKENS, STOP_TOKENS[:1])),
                        st.lists(st.sampled_from(VOCAB), max_size=b.max_planted))
    return config, request


def make_config(raw: tuple, b: Bounds) -> SchedulerConfig:
    """A config vLLM 0.33.0 accepts (`SchedulerConfig` validates as vLLM does), tilted towards tight KV."""
    L, bs, seqs, unchunked, budget, blocks, thr_on, thr, adaptive, active, active_on, policy, watermark, no_isl = raw
    big = 4 * b.max_model_len[1]
    lo = max(seqs, L if unchunked else 1)  # verify_max_model_len: budget >= max_num_seqs, and >= L unchunked
    need = cdiv(L, bs)
    threshold = 1 + _scaled(thr, b.max_model_len[1], L - 1) if thr_on else 0
    return SchedulerConfig(
        max_num_batched_tokens=lo + _scaled(budget, big, 2 * L), max_num_seqs=seqs, max_model_len=L, block_size=bs,
        num_gpu_blocks=1 + need + _scaled(blocks, big, (b.max_sequences_in_cache - 1) * need),
        long_prefill_token_threshold=threshold, long_prefill_token_threshold_adaptive=threshold > 0 and adaptive,
        enable_chunked_prefill=not unchunked, policy=policy, watermark=watermark, scheduler_reserve_full_isl=not no_isl,
        max_num_active_seqs=min(active, seqs) if active_on else None,
    )


def make_request(raw: tuple, config: SchedulerConfig, b: Bounds, index: int, step: int) -> WorkloadRequest:
    """A request vLLM's input processing admits (1 <= prompt < L, min_tokens <= max_tokens), with its samples."""
    prompt, max_tokens, min_tokens, priority, arrival, eos, ignore_eos, stops, planted = raw
    fcfs = config.policy == "fcfs"  # vLLM rejects a nonzero priority unless the policy is PRIORITY
    request = Request(
        request_id=f"r{index}", prompt_token_ids=(10,) * (1 + _scaled(prompt, b.max_model_len[1], config.max_model_len - 2)),
        # max_tokens may exceed L - prompt: the max_model_len cap must then win, whatever min_tokens says (Z4).
        max_tokens=max_tokens, min_tokens=min(min_tokens, max_tokens), eos_token_id=eos, ignore_eos=ignore_eos,
        stop_token_ids=stops, priority=0 if fcfs else priority,
        # vLLM stamps arrival on receipt; under PRIORITY, ties and reorderings reach the (priority, arrival) tie-break.
        arrival_time=float(index if fcfs else arrival),
    )
    return WorkloadRequest(request, step, tuple(planted))


class SchedulerMachine(RuleBasedStateMachine):
    bounds = Bounds()
    log = RunLog()

    def __init__(self) -> None:
        super().__init__()
        log = type(self).log
        if log.deadline is not None and log.first_failure is None and time.perf_counter() > log.deadline:
            raise OutOfTime()
        self.run = log.current = Run()
        self.state = None
        self.view = None  # the last step's StepView; None until a step, and again after an add or abort
        self.records: list[StepRecord] = []
        self.pending: tuple[list[str], list[str], dict[str, FinishedRequest]] = ([], [], {})
        self.trace_violations: list[monitor.Violation] | None = None
        self.coverage: dict[str, float] = dict.fromkeys(COVERAGE, 0.0)

    def _fail(self, kind: str, detail: str, cause: BaseException | None = None) -> None:
        log = type(self).log
        if log.expect is None or kind in log.expect or cause is not None:
            log.first_failure = log.first_failure or time.perf_counter()
            raise Counterexample.of(kind)(f"step {self.run.steps - 1}: {kind}: {detail}") from cause

    def _call(self, fn, *args):
        """vLLM's asserts, kept in the reference, are its built-in monitors: a failing one is a counterexample."""
        try:
            return fn(*args)
        except AssertionError as e:
            self._fail("assertion", f"{fn.__name__}: {e}", e)
        except Exception:
            type(self).log.first_failure = type(self).log.first_failure or time.perf_counter()
            raise

    @initialize(data=st.data(), initial=st.integers(0, 3))
    def configure(self, data: st.DataObject, initial: int) -> None:
        """A config, and a few requests already waiting (for runs where swarm testing disables add_request)."""
        self.run.config = make_config(data.draw(_raw(self.bounds)[0], label="config"), self.bounds)
        self.state = api.initial_state(self.run.config)
        self.run.program.append(repr(self.run.config))
        for _ in range(initial):
            self.add_request(data)

    def between_steps(self) -> bool:
        return len(self.pending[0]) + len(self.pending[1]) < self.bounds.max_events_between_steps

    @precondition(lambda self: self.between_steps())
    @rule(data=st.data())
    def add_request(self, data: st.DataObject) -> None:
        raw = data.draw(_raw(self.bounds)[1], label="request")
        r = make_request(raw, self.run.config, self.bounds, len(self.run.requests), self.run.steps)
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
        pre = self.state
        self.run.steps += 1
        out, mid = self._call(api.schedule, pre)
        model_output = fake_model(self.run.workload(), out, StateSummary.of(mid))
        self.run.program.append(f"step {self.run.steps - 1}: scheduled {dict(out.num_scheduled_tokens)}, "
                                f"preempted {sorted(out.preempted_req_ids)}, sampled {dict(model_output.sampled_token_ids)}")
        post, finished = self._call(api.update_from_output, mid, out, model_output)
        self.state = post
        self.view = view_from_states(pre, out, post, model_output=model_output, finished=finished)
        self.note_coverage(pre, out, mid)
        added, aborted, finished_by_abort = self.pending
        self.records.append(StepRecord(self.run.steps - 1, tuple(added), tuple(aborted), out, model_output,
                                       StateSummary.of(post), {**finished_by_abort, **finished}))
        self.pending = ([], [], {})
        self.trace_violations = None

    def check_trace(self, name: str) -> None:
        if self.view is None:
            return
        if self.trace_violations is None:  # the monitors' own trace-level code
            s = self.state  # drained as the engine loop means it: nothing queued, no report outstanding
            end = "max_steps" if s.running or s.waiting or s.finished_req_ids else "drained"
            self.trace_violations = list(monitor.trace_violations(Trace(self.run.workload(), tuple(self.records), "reference", end)))
        for v in self.trace_violations:
            if v.invariant == name:
                self._fail(name, v.detail)

    def note_coverage(self, pre, out, mid) -> None:
        """What `target()` steers towards: contention, not a lone request preempting itself over and over."""
        if len(pre.running) > 1:
            self.coverage["preemptions among several running"] += len(out.preempted_req_ids)
        # A victim ahead of a request scheduled in the same step: PRIORITY's refund path (bug-zoo Z1).
        last = max((pre.running.index(rid) for rid in out.num_scheduled_tokens if rid in pre.running), default=-1)
        self.coverage["victims ahead of a scheduled request"] += sum(
            pre.running.index(rid) < last for rid in out.preempted_req_ids if rid in pre.running)
        self.coverage["KV blocks in use, summed over steps"] += 1 - mid.num_free_blocks / self.run.config.num_usable_blocks

    def teardown(self) -> None:
        if self.run.config is not None:
            for label, score in self.coverage.items():
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


def machine_for(bounds: Bounds = Bounds()) -> type[SchedulerMachine]:
    """A fresh machine class for these bounds, with its own run log, so two hunts never share one."""
    return type("SchedulerMachine", (SchedulerMachine,), {"bounds": bounds, "log": RunLog()})


def profile(max_examples: int, step_count: int, **kw) -> settings:
    """Stable settings: no database, no deadline, derandomized."""
    return settings(max_examples=max_examples, stateful_step_count=step_count, deadline=None, database=None,
                    derandomize=True, print_blob=False, suppress_health_check=list(HealthCheck), **kw)


FAST = profile(100, 30)
LONG = profile(3000, 60)


def hunt_state_machine(mutant: Mutant | None, budget_s: float = 60.0, max_examples: int = 3000, step_count: int = 25,
                       bounds: Bounds = Bounds(), seed: int = 0, expect: tuple[str, ...] | None = None) -> Finding | None:
    """Run the machine on the mutated reference: the shrunk counterexample, or None if none turned up.

    `size` is (requests, steps) of Hypothesis's shrunk example, `step` the
    0-based step that failed, `workload` replays it, `original` is the run as
    a program. `mutant=None` runs the pristine reference. With `expect`, only
    those checks (and vLLM's asserts) count: a mutant often breaks several
    rules, and Hypothesis shrinks towards whichever breaks in the smallest run.
    The budget bounds the search, not the shrinking that follows a find.
    """
    machine = machine_for(bounds)
    hypothesis_seed(seed)(machine)  # a fixed seed, independent of this file's source (derandomize hashes it)
    cfg = profile(max_examples, step_count, phases=(Phase.explicit, Phase.generate, Phase.target, Phase.shrink),
                  report_multiple_bugs=False, verbosity=Verbosity.quiet)
    log = machine.log
    log.started = time.perf_counter()
    log.deadline = log.started + budget_s
    log.expect = frozenset(expect) if expect is not None else None
    with applied(mutant) if mutant is not None else nullcontext():
        try:
            run_state_machine_as_test(machine, settings=cfg)
            return None
        except OutOfTime:
            return None
        except Exception as e:  # noqa: BLE001 - any failure of the reference is a finding
            failure = e
    run = log.current
    what = failure.kind if isinstance(failure, Counterexample) else f"error:{type(failure).__name__}"
    return Finding(mutant.name if mutant else "pristine", "state-machine", what, run.steps - 1, run.workload(),
                   "\n".join([*run.program, str(failure)]), (log.first_failure or time.perf_counter()) - log.started,
                   (len(run.requests), run.steps))
