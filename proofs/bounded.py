"""Bounded scenarios: raw ints that CrossHair makes symbolic, branched into a small workload and run on the reference.

Why the inputs look the way they do (each choice was measured; docs/crosshair.md has the numbers):

* A contract takes `Knobs` and three `Ask`s: small frozen dataclasses of
  plain ints, which CrossHair builds symbolically field by field.
* The bounds are not preconditions. `decode` branches each raw int into a
  value within its bounds (`_pick`, a bisection), so every input decodes to
  a well-formed scenario. With `pre:` lines instead, CrossHair spent about
  65% of its paths on inputs that failed them.
* `_pick` branches rather than realizing. Indexing with a symbolic int, or
  `(token,) * n`, makes CrossHair pin the first value its solver offers
  until that value's whole subtree is exhausted: in a 40 CPU-s run every
  path had the same block count and one request. A comparison is a fresh
  random decision on each path, so the search moves across the whole
  bounded space.
* Once decoded, the scenario is concrete, and the reference runs on it with
  tracing off (`NoTracing`, in `contracts.py`): every branch the reference
  could take is already decided by the picks, so tracing it changes nothing
  but the speed (20x slower, measured).
* The picks lean (see `decode`) toward what breaks schedulers; the leaning
  decides the search order, never what is in bounds.

A decoded scenario is an ordinary `Workload`, validated like a user's file,
and the fake model is `spec.engine.fake_model`, the one every engine is
driven by. `run` drives the reference's pure API (`initial_state`,
`add_request`, `abort`, `schedule`, `update_from_output`) in the order of
`spec.engine.steps`. Nothing here states an invariant: the contracts
evaluate the catalogue's predicates and the monitor's trace checks.

Token ids: prompts are all `PROMPT_TOKEN`; the model samples `FILLER`,
except at output index `eos_at`, where it samples `EOS` (-1: never).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from crosshair import NoTracing

from ..reference_impl.api import abort, add_request, initial_state, schedule, update_from_output
from ..spec.config import SchedulerConfig
from ..spec.engine import fake_model
from ..spec.invariants.build import view_from_states
from ..spec.invariants.views import StepView
from ..spec.output import SchedulerOutput
from ..spec.request import Request, RequestStatus
from ..spec.state import SchedulerState
from ..spec.trace import FinishedRequest, StateSummary, StepRecord, Trace
from ..spec.workload import Abort, Workload, WorkloadRequest

PROMPT_TOKEN, EOS, FILLER = 1, 2, 7
# The bounds. Each is the largest value a pick can take; docs/crosshair.md states them in words.
MAX_MODEL_LEN = 8  # L in 2..8; prompts in 1..L-1
MAX_SEQS = 3  # max_num_seqs in 1..3
BUDGET_EXTRA = 4  # max_num_batched_tokens in max_num_seqs..max(max_num_seqs, L) + 4
MAX_GPU_BLOCKS = 8  # num_gpu_blocks in 2..8, the null block included
MAX_TOKENS = 3  # max_tokens in 1..3, min_tokens in 0..max_tokens
MAX_GAP = 2  # steps between consecutive arrivals
MAX_ABORT_AFTER = 3  # one request at most is aborted, 0..3 steps after its arrival
MAX_REQUESTS = 3
# Enough for three requests to prefill and decode at a budget of a few tokens;
# a run that has not drained by then has still been checked at every step it took.
MAX_STEPS = 24


@dataclass(frozen=True)
class Knobs:
    """Raw ints for the scheduler config; any values at all, `decode` branches them into the bounds."""

    policy: int
    max_model_len: int
    block_size: int
    max_num_seqs: int
    chunked_prefill: int
    max_num_batched_tokens: int
    long_prefill_token_threshold: int
    adaptive: int
    num_gpu_blocks: int
    abort_request: int
    abort_after: int


@dataclass(frozen=True)
class Ask:
    """Raw ints for one request."""

    arrival_gap: int
    prompt: int
    max_tokens: int
    min_tokens: int
    priority: int
    eos_at: int


@dataclass(frozen=True)
class Req:
    """One decoded request. `eos_at`: the output index sampled as EOS, -1 never; `abort_step` -1: never."""

    prompt: int
    max_tokens: int
    min_tokens: int
    priority: int
    arrival_step: int
    eos_at: int
    abort_step: int


def _pick(x: int, lo: int, hi: int, high: bool = False) -> int:
    """A concrete value in lo..hi, chosen by branching on x (bisection).

    CrossHair takes the true side of a fresh branch one time in four, so
    `x > mid` leans toward the low half and `x <= mid` (high=True) toward
    the high half. The same x is compared at every level, so each branch
    keeps x on one side of mid: the mapping is monotone and every value is
    reachable.
    """
    while lo < hi:
        mid = (lo + hi) // 2
        if high:
            if x <= mid:
                hi = mid
            else:
                lo = mid + 1
        elif x > mid:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _rare(x: int, lo: int, hi: int) -> int:
    """lo three times in four (the default: no EOS, no abort, no threshold), else a value in lo+1..hi."""
    if lo < hi and x > lo:  # CrossHair takes the true side one time in four
        return _pick(x, lo + 1, hi)
    return lo


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def decode(k: Knobs, asks: tuple[Ask, ...], n: int) -> tuple[SchedulerConfig, tuple[Req, ...]]:
    """Branch raw ints into a well-formed bounded scenario; every input decodes to one.

    Later picks are bounded by earlier ones (a prompt by L, min_tokens by
    max_tokens, an abort by the arrival, the blocks by what the requests
    could ever hold), so no path is spent on an ill-formed scenario. The
    leanings tilt the search toward what breaks schedulers: several requests,
    long outputs, and too few blocks.
    """
    priority = bool(_pick(k.policy, 0, 1, high=True))
    L = _pick(k.max_model_len, 2, MAX_MODEL_LEN, high=True)
    block_size = (1, 2, 4)[_pick(k.block_size, 0, 2)]
    seqs = _pick(k.max_num_seqs, 1, MAX_SEQS, high=True)
    chunked = not _rare(k.chunked_prefill, 0, 1)
    # vLLM refuses max_num_batched_tokens < max_num_seqs, and < L without chunked prefill.
    budget = _pick(k.max_num_batched_tokens, seqs if chunked else max(seqs, L), max(seqs, L) + BUDGET_EXTRA)
    threshold = _rare(k.long_prefill_token_threshold, 0, L)
    adaptive = bool(_rare(k.adaptive, 0, 1))
    fields: list[list[int]] = []  # Req fields; built into dataclasses only once every pick is made
    arrival = demand = 0
    for a in asks[:_pick(n, 1, min(len(asks), MAX_REQUESTS), high=True)]:
        arrival += _pick(a.arrival_gap, 0, MAX_GAP)
        prompt = _pick(a.prompt, 1, L - 1)
        max_tokens = _pick(a.max_tokens, 1, MAX_TOKENS, high=True)
        fields.append([prompt, max_tokens, _rare(a.min_tokens, 0, max_tokens), _pick(a.priority, 0, 1) if priority else 0,
                       arrival, _rare(a.eos_at, -1, max_tokens - 1), -1])
        demand += _cdiv(min(prompt + max_tokens, L), block_size)
    aborted = _rare(k.abort_request, -1, len(fields) - 1)
    if aborted >= 0:  # one abort at most: it ends a request, which only makes a scenario smaller
        fields[aborted][6] = fields[aborted][4] + _pick(k.abort_after, 0, MAX_ABORT_AFTER)
    # More usable blocks than all requests could hold at once would change only which ids sit unused.
    blocks = 1 + _pick(k.num_gpu_blocks, 1, min(demand, MAX_GPU_BLOCKS - 1))
    with NoTracing():  # every value is concrete now; building and validating them needs no symbolic tracing
        config = SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=seqs, max_model_len=L, block_size=block_size,
                                 num_gpu_blocks=blocks, long_prefill_token_threshold=threshold,
                                 long_prefill_token_threshold_adaptive=adaptive, enable_chunked_prefill=chunked,
                                 policy="priority" if priority else "fcfs")
        return config, tuple(Req(*f) for f in fields)


def workload(config: SchedulerConfig, reqs: tuple[Req, ...]) -> Workload:
    """The scenario as a workload file would state it; arrival times follow the index, as arrival steps do."""
    requests = tuple(
        WorkloadRequest(
            Request(f"r{i}", (PROMPT_TOKEN,) * r.prompt, r.max_tokens, min_tokens=r.min_tokens, eos_token_id=EOS,
                    priority=r.priority, arrival_time=float(i)),
            r.arrival_step,
            (FILLER,) * r.eos_at + (EOS,) if r.eos_at >= 0 else (),
        )
        for i, r in enumerate(reqs)
    )
    aborts = tuple(Abort(r.abort_step, f"r{i}") for i, r in enumerate(reqs) if r.abort_step >= 0)
    return Workload(config, requests, aborts, name="crosshair-scenario", max_steps=MAX_STEPS)


@dataclass(frozen=True)
class Step:
    pre: SchedulerState  # what schedule() starts from: arrivals and aborts applied
    output: SchedulerOutput
    post: SchedulerState  # after update_from_output
    record: StepRecord

    def view(self) -> StepView:
        # The same arguments `views_from_trace` passes: what was sampled, and what finished in the step.
        return view_from_states(self.pre, self.output, self.post, self.record.model_output, self.record.finished)


def run(w: Workload) -> Iterator[Step]:
    """`spec.engine.steps`, through the pure API, one step at a time."""
    state = initial_state(w.config)
    for step in range(w.max_steps):
        added = w.arrivals_at(step)
        for request in added:
            state = add_request(state, request)
        aborted = w.aborts_at(step)
        # The engine loop reports an abort of a live request as finished in this step, with its outputs so far.
        finished = {rid: FinishedRequest(RequestStatus.FINISHED_ABORTED, state.requests[rid].output_token_ids)
                    for rid in aborted if rid in state.requests}
        if aborted:
            state = abort(state, aborted)
        output, scheduled = schedule(state)
        model_output = fake_model(w, output, StateSummary.of(scheduled))
        post, finished_in_update = update_from_output(scheduled, output, model_output)
        finished.update(finished_in_update)
        yield Step(state, output, post, StepRecord(step, tuple(r.request_id for r in added), tuple(aborted), output,
                                                   model_output, StateSummary.of(post), finished))
        state = post
        if not (post.running or post.waiting or finished_in_update) and step >= w.last_event_step:
            return


def trace_of(w: Workload, records: list[StepRecord]) -> Trace:
    """A trace of the steps taken, ended as `spec.engine.run` would end it."""
    last = records[-1]
    drained = len(records) < w.max_steps or (not (last.state.running or last.state.waiting)
                                               and last.step >= w.last_event_step)
    return Trace(w, tuple(records), "reference", "drained" if drained else "max_steps")
