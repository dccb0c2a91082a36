"""Workload families: each one aims the scheduler at one part of its semantics.

A family is written once, against a tiny `Draw` interface, and serves two
masters: `generate(family, seed, index)` draws it from a seeded
`random.Random` for reproducible, shardable campaigns, and
`strategies.workloads()` draws it through Hypothesis for property tests,
with Hypothesis's shrinking. The sizes are small on purpose: every
behaviour we pin shows up with a few requests, a few blocks and a few dozen
steps, and small workloads make small counterexamples.
"""

from __future__ import annotations

import random
from typing import Callable, Protocol, Sequence, TypeVar

from ..spec.config import SchedulerConfig
from ..spec.request import Request
from ..spec.workload import Abort, Workload, WorkloadRequest

T = TypeVar("T")
EOS = 2
STOP_TOKENS = (5, 6)
MAX_STEPS = 120


class Draw(Protocol):
    def int(self, lo: int, hi: int) -> int: ...

    def choice(self, options: Sequence[T]) -> T: ...

    def bool(self) -> bool: ...


class RandomDraw:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def bool(self) -> bool:
        return self.rng.random() < 0.5


def _requests(d: Draw, n: int, L: int, max_prompt: int, max_tokens: int, spread: int, *,
              priority: bool = False, stops: bool = False, min_tokens: bool = False) -> tuple[WorkloadRequest, ...]:
    out = []
    for i in range(n):
        prompt_len = d.int(1, max(1, min(L - 1, max_prompt)))
        mt = d.int(1, max_tokens)
        min_tokens = d.int(0, mt) if (stops or min_tokens) and d.bool() else 0
        vocab = (10, 20) if not stops else (2, 12)  # the stop family lands on EOS and stop tokens
        planted = tuple(d.int(*vocab) for _ in range(d.int(0, mt + 1)))
        request = Request(
            request_id=f"r{i}",
            prompt_token_ids=tuple(d.int(10, 13) for _ in range(prompt_len)),
            max_tokens=mt,
            min_tokens=min_tokens,
            eos_token_id=EOS if stops else None,
            ignore_eos=stops and d.bool(),
            stop_token_ids=STOP_TOKENS if stops and d.bool() else (),
            priority=d.int(0, 3) if priority else 0,
            arrival_time=float(d.int(0, 2 * n)) if priority else float(i),
        )
        out.append(WorkloadRequest(request, d.int(0, spread), planted))
    return tuple(out)


def _config(d: Draw, *, budget: int, seqs: int, L: int, bs: int, blocks: int, **kw) -> SchedulerConfig:
    return SchedulerConfig(max_num_batched_tokens=max(budget, seqs), max_num_seqs=seqs, max_model_len=L,
                           block_size=bs, num_gpu_blocks=blocks, **kw)


def budget(d: Draw) -> Workload:
    L, bs = d.int(64, 256), d.choice([4, 8, 16])
    cfg = _config(d, budget=d.int(8, 96), seqs=d.int(1, 8), L=L, bs=bs, blocks=L * 8 // bs + 1)
    return Workload(cfg, _requests(d, d.int(1, 6), L, 120, 8, 6))


def threshold(d: Draw) -> Workload:
    L, bs = d.int(64, 256), d.choice([4, 16])
    cfg = _config(d, budget=d.int(16, 128), seqs=d.int(2, 8), L=L, bs=bs, blocks=L * 8 // bs + 1,
                  long_prefill_token_threshold=d.int(1, 48), long_prefill_token_threshold_adaptive=d.bool())
    return Workload(cfg, _requests(d, d.int(1, 6), L, 150, 6, 5))


def no_chunking(d: Draw) -> Workload:
    L, bs = d.int(32, 128), d.choice([4, 16])
    cfg = _config(d, budget=d.int(L, 2 * L), seqs=d.int(1, 6), L=L, bs=bs, blocks=L * 6 // bs + 1,
                  enable_chunked_prefill=False, long_prefill_token_threshold=d.choice([0, 0, d.int(1, 16)]))
    return Workload(cfg, _requests(d, d.int(1, 6), L, L, 6, 4))


def kv_pressure(d: Draw) -> Workload:
    bs = d.choice([2, 4, 8])
    L = d.int(32, 96)
    cfg = _config(d, budget=d.int(16, 128), seqs=d.int(2, 8), L=L, bs=bs, blocks=d.int(3, 24),
                  watermark=d.choice([0.0, 0.0, 0.1, 0.3]), scheduler_reserve_full_isl=d.choice([True, True, False]))
    return Workload(cfg, _requests(d, d.int(2, 6), L, 24, 16, 6), max_steps=MAX_STEPS)


def priority(d: Draw) -> Workload:
    bs = d.choice([2, 4])
    L = d.int(32, 96)
    cfg = _config(d, budget=d.int(16, 128), seqs=d.int(1, 6), L=L, bs=bs, blocks=d.int(4, 24), policy="priority",
                  long_prefill_token_threshold=d.choice([0, d.int(1, 16)]))
    return Workload(cfg, _requests(d, d.int(2, 6), L, 24, 12, 6, priority=True), max_steps=MAX_STEPS)


def max_model_len(d: Draw) -> Workload:
    L, bs = d.int(8, 40), d.choice([2, 4, 16])
    cfg = _config(d, budget=d.int(8, 64), seqs=d.int(1, 6), L=L, bs=bs, blocks=d.int(L // bs + 2, 64))
    # min_tokens beyond what fits under L: the length cap must still win (Z4).
    return Workload(cfg, _requests(d, d.int(1, 5), L, L - 1, 3 * L, 4, min_tokens=True), max_steps=MAX_STEPS)


def stops(d: Draw) -> Workload:
    L, bs = d.int(32, 128), d.choice([4, 16])
    cfg = _config(d, budget=d.int(16, 128), seqs=d.int(1, 8), L=L, bs=bs, blocks=L * 6 // bs + 1)
    return Workload(cfg, _requests(d, d.int(1, 6), L, 24, 12, 4, stops=True))


def aborts(d: Draw) -> Workload:
    L, bs = d.int(32, 128), d.choice([2, 4, 16])
    cfg = _config(d, budget=d.int(8, 96), seqs=d.int(1, 6), L=L, bs=bs, blocks=d.int(6, 40),
                  policy=d.choice(["fcfs", "priority"]))
    reqs = _requests(d, d.int(1, 6), L, 40, 10, 4, priority=cfg.policy == "priority")
    chosen = [r.request_id for r in reqs if d.bool()]
    abort_list = tuple(Abort(d.int(0, 12), rid) for rid in chosen)
    return Workload(cfg, reqs, abort_list, max_steps=MAX_STEPS)


def big_batch(d: Draw) -> Workload:
    L, bs = d.int(64, 256), d.choice([8, 16])
    n = d.int(20, 80)
    cfg = _config(d, budget=d.int(64, 512), seqs=d.int(16, 64), L=L, bs=bs, blocks=d.int(n * 2, n * 8))
    return Workload(cfg, _requests(d, n, L, 48, 6, 8), max_steps=MAX_STEPS)


FAMILIES: dict[str, Callable[[Draw], Workload]] = {
    "budget": budget,
    "threshold": threshold,
    "no-chunking": no_chunking,
    "kv-pressure": kv_pressure,
    "priority": priority,
    "max-model-len": max_model_len,
    "stops": stops,
    "aborts": aborts,
    "big-batch": big_batch,
}


def generate(family: str, seed: int, index: int) -> Workload:
    """The `index`-th workload of `family` in the campaign seeded by `seed`: the same on every machine."""
    rng = random.Random(f"{family}/{seed}/{index}")
    workload = FAMILIES[family](RandomDraw(rng))
    return workload.replace(name=f"{family}-{seed}-{index}", description=f"family {family}, seed {seed}, index {index}")
