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
driven by. `bounded_run.run` drives the reference through
`spec.engine.steps` itself, the loop every engine runs. Nothing here states an invariant: the contracts
evaluate the catalogue's predicates and the monitor's trace checks.

Token ids: prompts are all `PROMPT_TOKEN`; the model samples `FILLER`,
except at output index `eos_at`, where it samples `EOS` (-1: never).
"""

from __future__ import annotations

from dataclasses import dataclass

from crosshair import NoTracing

from ...spec.config import SchedulerConfig
from ...spec.request import Request
from ...spec.workload import Abort, Workload, WorkloadRequest

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
MAX_SPEC_TOKENS = 2  # k in 1..2 with spec decode, 0..2 under async
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
class Draws:
    """Raw ints that only a feature contract takes (`contracts.FEATURE_OF`): k, and each request's drafts.

    A separate argument, not fields of `Knobs` and `Ask`: a symbolic field
    that no branch reads still changes CrossHair's search, and the core
    contracts' searches are pinned (tests/quality).
    """

    num_speculative_tokens: int
    drafts: tuple[int, int, int]
    accepted: tuple[int, int, int]


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
    drafts: int = 0  # spec decode: every proposal is (drafts, accepted)
    accepted: int = 0


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


def decode(
    k: Knobs, asks: tuple[Ask, ...], n: int, feature: str | None = None, draws: Draws | None = None
) -> tuple[SchedulerConfig, tuple[Req, ...]]:
    """Branch raw ints into a well-formed bounded scenario; every input decodes to one.

    Later picks are bounded by earlier ones (a prompt by L, min_tokens by
    max_tokens, an abort by the arrival, the blocks by what the requests
    could ever hold), so no path is spent on an ill-formed scenario. The
    leanings tilt the search toward what breaks schedulers: several requests,
    long outputs, and too few blocks.

    `feature` (concrete: a feature contract's own) turns on one of the three
    features: prefix caching (every prompt is the same token, so prefixes are
    shared and hit), spec decode (k in 1..2; each request's drafts and
    accepted count are picked once from `draws`, and every proposal is
    that), or async scheduling (k in 0..2, mostly 0, drafts the same way).
    """
    priority = bool(_pick(k.policy, 0, 1, high=True))
    L = _pick(k.max_model_len, 2, MAX_MODEL_LEN, high=True)
    block_size = (1, 2, 4)[_pick(k.block_size, 0, 2)]
    seqs = _pick(k.max_num_seqs, 1, MAX_SEQS, high=True)
    chunked = not _rare(k.chunked_prefill, 0, 1)
    # vLLM refuses max_num_batched_tokens < max_num_seqs, and < L without chunked prefill.
    budget = _pick(k.max_num_batched_tokens, seqs if chunked else max(seqs, L), max(seqs, L) + BUDGET_EXTRA)
    threshold = _rare(k.long_prefill_token_threshold, 0, L)
    spec_k = 0
    if draws is not None and feature == "spec-decode":
        spec_k = _pick(draws.num_speculative_tokens, 1, MAX_SPEC_TOKENS)
    elif draws is not None and feature == "async":
        spec_k = _rare(draws.num_speculative_tokens, 0, MAX_SPEC_TOKENS)
    if 0 < threshold < 1 + spec_k:  # exp1's threshold, which spec/config.py refuses (vLLM crashes on it)
        threshold = 0
    adaptive = bool(_rare(k.adaptive, 0, 1))
    fields: list[list[int]] = []  # Req fields; built into dataclasses only once every pick is made
    arrival = demand = 0
    for i, a in enumerate(asks[: _pick(n, 1, min(len(asks), MAX_REQUESTS), high=True)]):
        arrival += _pick(a.arrival_gap, 0, MAX_GAP)
        prompt = _pick(a.prompt, 1, L - 1)
        max_tokens = _pick(a.max_tokens, 1, MAX_TOKENS, high=True)
        fields.append(
            [
                prompt,
                max_tokens,
                _rare(a.min_tokens, 0, max_tokens),
                _pick(a.priority, 0, 1) if priority else 0,
                arrival,
                _rare(a.eos_at, -1, max_tokens - 1),
                -1,
            ]
        )
        if spec_k and draws is not None:
            drafts = _pick(draws.drafts[i], 0, spec_k, high=True)
            fields[-1] += [drafts, _pick(draws.accepted[i], 0, drafts)]
        demand += _cdiv(min(prompt + max_tokens, L), block_size)
    aborted = _rare(k.abort_request, -1, len(fields) - 1)
    if aborted >= 0:  # one abort at most: it ends a request, which only makes a scenario smaller
        fields[aborted][6] = fields[aborted][4] + _pick(k.abort_after, 0, MAX_ABORT_AFTER)
    # More usable blocks than all requests could hold at once would change only which ids sit unused.
    blocks = 1 + _pick(k.num_gpu_blocks, 1, min(demand, MAX_GPU_BLOCKS - 1))
    with NoTracing():  # every value is concrete now; building and validating them needs no symbolic tracing
        config = SchedulerConfig(
            max_num_batched_tokens=budget,
            max_num_seqs=seqs,
            max_model_len=L,
            block_size=block_size,
            num_gpu_blocks=blocks,
            long_prefill_token_threshold=threshold,
            long_prefill_token_threshold_adaptive=adaptive,
            enable_chunked_prefill=chunked,
            policy="priority" if priority else "fcfs",
            enable_prefix_caching=feature == "prefix-caching",
            num_speculative_tokens=spec_k,
            async_scheduling=feature == "async",
        )
        return config, tuple(Req(*f) for f in fields)


def workload(config: SchedulerConfig, reqs: tuple[Req, ...]) -> Workload:
    """The scenario as a workload file would state it; arrival times follow the index, as arrival steps do."""
    requests = tuple(
        WorkloadRequest(
            Request(
                f"r{i}",
                (PROMPT_TOKEN,) * r.prompt,
                r.max_tokens,
                min_tokens=r.min_tokens,
                eos_token_id=EOS,
                priority=r.priority,
                arrival_time=float(i),
            ),
            r.arrival_step,
            (FILLER,) * r.eos_at + (EOS,) if r.eos_at >= 0 else (),
            ((r.drafts, r.accepted),) * MAX_STEPS if r.drafts else (),
        )
        for i, r in enumerate(reqs)
    )
    aborts = tuple(Abort(r.abort_step, f"r{i}") for i, r in enumerate(reqs) if r.abort_step >= 0)
    return Workload(config, requests, aborts, name="crosshair-scenario", max_steps=MAX_STEPS)
