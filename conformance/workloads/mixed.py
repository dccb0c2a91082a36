"""The `mixed-*` families: every knob at once, each workload a random subset of them (swarm testing).

The other families aim at one part of the semantics each, so a behaviour
that needs several knobs together (async scheduling, PRIORITY, a running
request skipped by the pass and a full KV pool, in one step) was drawn by
none of them. There are four, one per policy and scheduling (`mixed-fcfs-sync`,
`mixed-fcfs-async`, `mixed-priority-sync`, `mixed-priority-async`), so a
campaign gives each quarter of the coverage map (`cell_coverage.py`) the same
share. Within a family spec decode and prefix caching take turns by index
(`generate` passes `index % 4`), so each of the 16 modes gets the same share
too; drawn through Hypothesis, they are drawn.

A workload is a few episodes, each drawn or not by a coin (swarm testing,
Groce et al., ISSTA 2012: a workload with fewer features on lets the ones
left interact more often), in this order:

* a lone prefill: one long prompt alone at step 0 (the threshold's
  lone-request rule);
* a burst: a few long prompts at once (the adaptive threshold's fair share);
* contention: 8 to 16 short requests, one a step, in a pool (mostly) just
  above the largest whole sequence, under PRIORITY each more important than
  the one before: requests are skipped, served and preempted in one pass,
  and victims sit before the request being served (Z1 refunds, T21);
* long runs: requests that run into `max_model_len`;
* a starved tail, one workload in three: `max_model_len` past the pool, and
  two last requests whose whole sequences never fit. The first is aborted
  late, while preempted for good; the second preempts itself for good (the
  D1 livelock).

Aborts (a coin) land right after an arrival, a few steps on, or late (on a
finished request). Every prompt fits the pool (`spec.workload.check_runnable`).
Drawn only through `Draw`, like every family, so each is a Hypothesis
strategy too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...spec.config import SchedulerConfig
from ...spec.request import Request
from ...spec.workload import Abort, Workload, WorkloadRequest

if TYPE_CHECKING:
    from .draw import Draw

EOS = 2  # as the other families: planted outputs from 2..12 land on EOS and the stop tokens
STOP_TOKENS = (5, 6)
MIXED_MAX_STEPS = 80


@dataclass(frozen=True)
class Knobs:
    policy: str
    async_scheduling: bool
    k: int  # num_speculative_tokens
    caching: bool
    block_size: int
    usable_blocks: int
    max_model_len: int
    chunked: bool
    budget: int
    threshold: int
    longest_prompt: int
    starve: bool  # L above the pool: a request whose whole sequence is longer never finishes (D1)


@dataclass(frozen=True)
class Drafted:
    """A request as an episode drafts it: what it is, when it comes, and whether (and when after) it is aborted."""

    prompt: tuple[int, ...]
    max_tokens: int
    arrival: int
    priority: int
    stoppable: bool = True  # may plant EOS and stop tokens
    abort_after: int | None = None


def _knobs(d: Draw, policy: str, async_scheduling: bool, features: int) -> Knobs:
    """The pool first: L at most the pool's tokens, so every whole sequence fits, unless starved."""
    k, caching, bs = d.int(1, 3) if features & 1 else 0, bool(features & 2), d.choice([2, 2, 2, 4])
    usable = d.choice([d.int(4, 7), d.int(4, 7), d.int(4, 7), d.int(4, 12), d.int(12, 32)])
    starve = d.int(0, 2) == 0
    cap = usable * bs
    L = cap + d.int(2, 8) if starve else d.int(max(8, cap // 2), cap)
    chunked = d.int(0, 7) > 0
    budget = d.int(L, 2 * L) if not chunked else d.choice([d.int(2, 12), d.int(16, 96), d.int(16, 96), d.int(16, 96)])
    longest = min(L - 1, cap, budget if not chunked else cap)
    threshold = 0
    if d.int(0, 2) > 0:  # 0 or at least 1 + k (exp1); below most prompts, so it cuts
        threshold = d.int(1 + k, max(1 + k, longest // 2))
    return Knobs(policy, async_scheduling, k, caching, bs, usable, L, chunked, budget, threshold, longest, starve)


class _Prompts:
    """Prompts that fit L, the pool (and the budget, without chunking); under prefix caching most share a prefix
    or repeat one."""

    def __init__(self, d: Draw, knobs: Knobs) -> None:
        self.d, self.caching, self.longest = d, knobs.caching, knobs.longest_prompt
        self.shared = tuple(d.int(10, 12) for _ in range(self.longest))
        self.drawn: list[tuple[int, ...]] = []

    def __call__(self, lo: int, hi: int) -> tuple[int, ...]:
        d = self.d
        hi = min(hi, self.longest)
        length = d.int(min(lo, hi), hi)
        kind = d.int(0, 3) if self.caching else 3
        if kind == 0 and self.drawn:
            prompt = d.choice(self.drawn)  # a twin: a full hit
        elif kind in (0, 1, 2):
            prompt = self.shared[:length]
            if kind == 2:
                prompt = prompt[:-1] + (d.int(13, 15),)
        else:
            prompt = tuple(d.int(10, 15) for _ in range(length))
        self.drawn.append(prompt)
        return prompt


def _episodes(d: Draw, knobs: Knobs, prompt: Callable[[int, int], tuple[int, ...]]) -> list[Drafted]:
    out: list[Drafted] = []
    step, L = 0, knobs.max_model_len
    if d.int(0, 2) > 0:  # a lone prefill, past the threshold
        out.append(Drafted(prompt(knobs.threshold + 1, 64), d.choice([1, 2, 4]), 0, 3))
        step = d.int(1, 3)
    if d.int(0, 2) > 0:  # a burst
        out += [Drafted(prompt(4, 64), d.choice([1, 2, 4]), step, d.int(0, 3)) for _ in range(d.int(2, 4))]
        step += d.int(1, 4)
    if d.int(0, 7) > 0:  # contention
        n = d.int(8, 16)
        for i in range(n):
            priority = n - 1 - i  # each more important than the one before (FCFS ignores it)
            out.append(Drafted(prompt(1, 4), d.choice([2, 3, 4, 6]), step, priority))
            step += 1  # one a step: admitted one by one, so the pass meets them at different points of their lives
    if d.bool() or not out:  # long runs, into max_model_len (unless starved: the tail is for that)
        mt = 12 if knobs.starve else d.choice([12, 3 * L])
        out += [Drafted(prompt(1, 24), mt, step + d.int(0, 4), d.int(0, 3)) for _ in range(2)]
    return out


def _starve(d: Draw, knobs: Knobs, drafted: list[Drafted]) -> tuple[Knobs, list[Drafted]]:
    """The pool grows to fit every whole sequence drafted so far; L goes past it, and two requests come last
    whose prompts nearly fill the pool: after a few outputs neither fits, and each preempts itself for good
    (D1)."""
    bs, k = knobs.block_size, knobs.k
    usable = max(knobs.usable_blocks, *(-(-(len(r.prompt) + r.max_tokens + k) // bs) for r in drafted))
    cap = usable * bs
    L = cap + d.int(2, 8)  # at cap + 1 a request could still reach L: the last sampled token takes no slot
    after = max(r.arrival for r in drafted) + d.int(0, 6)
    tails = [  # under PRIORITY the first is the more important, so it is admitted (and stuck) first
        Drafted(tuple(d.int(10, 15) for _ in range(d.int(max(1, cap - 4), cap))), 3 * L, after, priority, False)
        for priority in (0, 3)
    ]
    return dataclasses.replace(knobs, usable_blocks=usable, max_model_len=L), drafted + tails


def _aborts(d: Draw, drafted: list[Drafted], starve: bool) -> list[Drafted]:
    """Right after arrival (waiting), a few steps on (running or preempted), or late (finished). Starved, the
    first of the two tails is aborted once it is preempted for good; the other keeps the livelock."""
    out, tails = (drafted[:-2], drafted[-2:]) if starve else (list(drafted), [])
    if d.bool():
        when = [0, d.int(1, 3), d.int(2, 8), d.int(10, 50)]
        out = [dataclasses.replace(r, abort_after=d.choice(when)) if d.bool() else r for r in out]
    if tails:
        tails[0] = dataclasses.replace(tails[0], abort_after=d.int(10, 30))
    return out + tails


def mixed(d: Draw, policy: str, async_scheduling: bool, stratum: int | None = None) -> Workload:
    """`stratum` (0..3) picks spec decode (bit 0) and prefix caching (bit 1); None draws them."""
    knobs = _knobs(d, policy, async_scheduling, d.int(0, 3) if stratum is None else stratum)
    drafted = _episodes(d, knobs, _Prompts(d, knobs))
    if knobs.starve:
        knobs, drafted = _starve(d, knobs, drafted)
    drafted = _aborts(d, drafted, knobs.starve)
    k, L, seqs = knobs.k, knobs.max_model_len, d.int(2, 8)
    config = SchedulerConfig(
        max_num_batched_tokens=max(knobs.budget, seqs, 1 + k, L if not knobs.chunked else 0),
        max_num_seqs=seqs,
        max_model_len=L,
        block_size=knobs.block_size,
        num_gpu_blocks=knobs.usable_blocks + 1,
        long_prefill_token_threshold=knobs.threshold,
        long_prefill_token_threshold_adaptive=d.int(0, 2) > 0,
        enable_chunked_prefill=knobs.chunked,
        policy="priority" if policy == "priority" else "fcfs",
        watermark=d.choice([0.0, 0.0, 0.0, 0.1]),
        scheduler_reserve_full_isl=d.choice([True, True, False]),
        enable_prefix_caching=knobs.caching,
        num_speculative_tokens=k,
        async_scheduling=async_scheduling,
    )
    stops = d.bool()
    requests, aborts = [], []
    for i, r in enumerate(drafted):
        mt, vocab = r.max_tokens, (2, 12) if stops and r.stoppable else (10, 14)
        planted = tuple(d.int(*vocab) for _ in range(d.int(0, min(mt, 24) + 1)))
        proposals = tuple((nd, d.int(0, nd)) for nd in (d.int(0, k) for _ in range(d.int(0, 12)))) if k else ()
        request = Request(
            request_id=f"r{i}",
            prompt_token_ids=r.prompt,
            max_tokens=mt,
            min_tokens=d.int(0, min(mt, 8)) if d.int(0, 3) == 0 else 0,
            eos_token_id=EOS if stops else None,
            ignore_eos=stops and d.int(0, 3) == 0,
            stop_token_ids=STOP_TOKENS if stops and d.bool() else (),
            priority=r.priority if policy == "priority" else 0,
            arrival_time=float(r.arrival) if policy == "priority" and d.bool() else float(i),
        )
        requests.append(WorkloadRequest(request, r.arrival, planted, proposals))
        if r.abort_after is not None:
            aborts.append(Abort(min(r.arrival + r.abort_after, MIXED_MAX_STEPS - 1), request.request_id))
    return Workload(config, tuple(requests), tuple(aborts), max_steps=MIXED_MAX_STEPS)


class MixedFamily:
    """One policy and scheduling. A campaign stratifies the rest: `generate` passes `index % strata`, so spec
    decode and prefix caching take turns and each of the four modes gets a quarter of the workloads exactly;
    Hypothesis (`strategies.py`) calls it with a draw alone, and the mode is drawn."""

    strata = 4

    def __init__(self, policy: str, async_scheduling: bool) -> None:
        self.policy, self.async_scheduling = policy, async_scheduling
        self.__name__ = f"mixed_{policy}_{'async' if async_scheduling else 'sync'}"

    def __call__(self, d: Draw, stratum: int | None = None) -> Workload:
        return mixed(d, self.policy, self.async_scheduling, stratum)


MIXED_FAMILIES: dict[str, MixedFamily] = {
    f"mixed-{policy}-{'async' if a else 'sync'}": MixedFamily(policy, a)
    for policy in ("fcfs", "priority")
    for a in (False, True)
}
