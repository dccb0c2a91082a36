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

import dataclasses
import random
from collections.abc import Callable, Sequence

from ...spec.config import SchedulerConfig
from ...spec.request import Request
from ...spec.workload import Abort, Workload, WorkloadRequest
from .deployment import DEPLOYMENT_FAMILIES
from .draw import Draw, RandomDraw
from .edges import WithEdges
from .mixed import MIXED_FAMILIES

EOS = 2
STOP_TOKENS = (5, 6)
MAX_STEPS = 120


def _requests(
    d: Draw,
    n: int,
    L: int,
    max_prompt: int,
    max_tokens: int,
    spread: int,
    *,
    priority: bool = False,
    stops: bool = False,
    min_tokens: bool = False,
) -> tuple[WorkloadRequest, ...]:
    out = []
    for i in range(n):
        prompt_len = d.int(1, max(1, min(L - 1, max_prompt)))
        mt = d.int(1, max_tokens)
        num_min_tokens = d.int(0, mt) if (stops or min_tokens) and d.bool() else 0
        vocab = (10, 20) if not stops else (2, 12)  # the stop family lands on EOS and stop tokens
        planted = tuple(d.int(*vocab) for _ in range(d.int(0, mt + 1)))
        request = Request(
            request_id=f"r{i}",
            prompt_token_ids=tuple(d.int(10, 13) for _ in range(prompt_len)),
            max_tokens=mt,
            min_tokens=num_min_tokens,
            eos_token_id=EOS if stops else None,
            ignore_eos=stops and d.bool(),
            stop_token_ids=STOP_TOKENS if stops and d.bool() else (),
            priority=d.int(0, 3) if priority else 0,
            arrival_time=float(d.int(0, 2 * n)) if priority else float(i),
        )
        out.append(WorkloadRequest(request, d.int(0, spread), planted))
    return tuple(out)


def _runnable(w: Workload) -> Workload:
    """Grow the pool to the largest prompt the workload must run (`spec.workload.check_runnable`).

    A prompt that needs more blocks than the pool is never admitted (or, with
    the full-sequence gate off, preempts itself forever), and at the head of
    the queue it idles everything behind it until `max_steps`: 105 of 2400
    workloads of six families did, which cost their coverage. A request the
    workload aborts once it has arrived may stay too big, as `check_runnable`
    allows. No draw is spent here, so every workload that fitted is as before.
    """
    c = w.config
    aborted = {a.request_id for a in w.aborts if a.step >= w.request(a.request_id).arrival_step}
    need = max(
        (-(-r.request.num_prompt_tokens // c.block_size) for r in w.requests if r.request_id not in aborted), default=0
    )
    if need <= c.num_usable_blocks:
        return w
    return w.replace(config=dataclasses.replace(c, num_gpu_blocks=need + 1))


def _config(d: Draw, *, budget: int, seqs: int, L: int, bs: int, blocks: int, **kw) -> SchedulerConfig:
    return SchedulerConfig(
        max_num_batched_tokens=max(budget, seqs),
        max_num_seqs=seqs,
        max_model_len=L,
        block_size=bs,
        num_gpu_blocks=blocks,
        **kw,
    )


def budget(d: Draw) -> Workload:
    L, bs = d.int(64, 256), d.choice([4, 8, 16])
    cfg = _config(d, budget=d.int(8, 96), seqs=d.int(1, 8), L=L, bs=bs, blocks=L * 8 // bs + 1)
    return Workload(cfg, _requests(d, d.int(1, 6), L, 120, 8, 6))


def threshold(d: Draw) -> Workload:
    L, bs = d.int(64, 256), d.choice([4, 16])
    cfg = _config(
        d,
        budget=d.int(16, 128),
        seqs=d.int(2, 8),
        L=L,
        bs=bs,
        blocks=L * 8 // bs + 1,
        long_prefill_token_threshold=d.int(1, 48),
        long_prefill_token_threshold_adaptive=d.bool(),
    )
    return Workload(cfg, _requests(d, d.int(1, 6), L, 150, 6, 5))


def no_chunking(d: Draw) -> Workload:
    L, bs = d.int(32, 128), d.choice([4, 16])
    cfg = _config(
        d,
        budget=d.int(L, 2 * L),
        seqs=d.int(1, 6),
        L=L,
        bs=bs,
        blocks=L * 6 // bs + 1,
        enable_chunked_prefill=False,
        long_prefill_token_threshold=d.choice([0, 0, d.int(1, 16)]),
    )
    return Workload(cfg, _requests(d, d.int(1, 6), L, L, 6, 4))


def kv_pressure(d: Draw) -> Workload:
    bs = d.choice([2, 4, 8])
    L = d.int(32, 96)
    cfg = _config(
        d,
        budget=d.int(16, 128),
        seqs=d.int(2, 8),
        L=L,
        bs=bs,
        blocks=d.int(3, 24),
        watermark=d.choice([0.0, 0.0, 0.1, 0.3]),
        scheduler_reserve_full_isl=d.choice([True, True, False]),
    )
    return _runnable(Workload(cfg, _requests(d, d.int(2, 6), L, 24, 16, 6), max_steps=MAX_STEPS))


def priority(d: Draw) -> Workload:
    bs = d.choice([2, 4])
    L = d.int(32, 96)
    cfg = _config(
        d,
        budget=d.int(16, 128),
        seqs=d.int(1, 6),
        L=L,
        bs=bs,
        blocks=d.int(4, 24),
        policy="priority",
        long_prefill_token_threshold=d.choice([0, d.int(1, 16)]),
    )
    return _runnable(Workload(cfg, _requests(d, d.int(2, 6), L, 24, 12, 6, priority=True), max_steps=MAX_STEPS))


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
    cfg = _config(
        d, budget=d.int(8, 96), seqs=d.int(1, 6), L=L, bs=bs, blocks=d.int(6, 40), policy=d.choice(["fcfs", "priority"])
    )
    reqs = _requests(d, d.int(1, 6), L, 40, 10, 4, priority=cfg.policy == "priority")
    chosen = [r.request_id for r in reqs if d.bool()]
    abort_list = _some_mid_step(d, tuple(Abort(d.int(0, 12), rid) for rid in chosen))
    return _runnable(Workload(cfg, reqs, abort_list, max_steps=MAX_STEPS))


def _some_mid_step(d: Draw, aborts: tuple[Abort, ...]) -> tuple[Abort, ...]:
    """About half the aborts land while the model runs (`Abort.mid_step`), as a client's disconnect does. Drawn
    after everything else, so the rest of a family's workloads are what they were before mid-step aborts."""
    return tuple(Abort(a.step, a.request_id, d.bool()) for a in aborts)


def big_batch(d: Draw) -> Workload:
    L, bs = d.int(64, 256), d.choice([8, 16])
    n = d.int(20, 80)
    cfg = _config(d, budget=d.int(64, 512), seqs=d.int(16, 64), L=L, bs=bs, blocks=d.int(n * 2, n * 8))
    return Workload(cfg, _requests(d, n, L, 48, 6, 8), max_steps=MAX_STEPS)


# ---- The three features: prefix caching, speculative decoding, async scheduling. ----
# Small on purpose too: block size 2-8, pools of a few blocks, at most ~60 steps.
FEATURE_MAX_STEPS = 60


def _prompts(d: Draw, n: int, bs: int, max_len: int, planted: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Prompts that share prefixes at block granularity, as chat traffic does.

    Each prompt is one of a few common prefixes (whole blocks) plus a suffix,
    a twin of an earlier prompt (a full hit: padded under spec decode when
    its length is 1 mod bs, capped at (T-1)//bs blocks otherwise, D6), or
    an earlier prompt followed by that request's planted outputs and a new
    turn (multi-turn: outputs are hashed too, T42), or something novel.

    Prompt tokens come from a small alphabet that starts at 0, as vLLM's own
    tests write prompts (`[0]*N`): blocks of zeros, whole blocks repeated,
    and prefixes that part inside a block are all common here, which is
    what once caught the spec's block hash treating 0 as nothing
    (`spec/block_hash.py`).
    """
    prefixes = [tuple(d.int(0, 2) for _ in range(bs * d.int(1, 3))) for _ in range(d.int(1, 3))]
    prompts: list[tuple[int, ...]] = []
    for _ in range(n):
        kind = d.int(0, 5) if prompts else d.int(0, 1)
        if kind == 0:
            prompt = d.choice(prefixes) + tuple(d.int(0, 2) for _ in range(d.int(0, 2 * bs)))
        elif kind == 1:  # whole blocks and one token: its twin is a decode-like admission
            prompt = d.choice(prefixes) + (d.int(0, 2),)
        elif kind in (2, 3):
            prompt = d.choice(prompts)
        elif kind == 4:
            j = d.int(0, len(prompts) - 1)
            prompt = (
                prompts[j]
                + planted[j][: d.int(0, len(planted[j]))]
                + tuple(d.int(0, 2) for _ in range(d.int(0, bs + 1)))
            )
        else:
            prompt = tuple(d.int(0, 4) for _ in range(d.int(1, 3 * bs)))
        prompts.append(prompt[:max_len] or (0,))
    return prompts


def _feature_requests(
    d: Draw, cfg: SchedulerConfig, n: int, max_tokens: int, spread: int, *, stops: bool = False, proposals: bool = False
) -> tuple[WorkloadRequest, ...]:
    """Requests over shared prompts; a later turn arrives after the request it continues."""
    k, bs = cfg.num_speculative_tokens, cfg.block_size
    vocab = (2, 12) if stops else (10, 14)
    planted = [tuple(d.int(*vocab) for _ in range(d.int(0, max_tokens + 1))) for _ in range(n)]
    prompts = _prompts(d, n, bs, min(cfg.max_model_len - 1, 6 * bs + 8), planted)
    out: list[WorkloadRequest] = []
    for i, prompt in enumerate(prompts):
        mt = d.int(1, max_tokens)
        request = Request(
            request_id=f"r{i}",
            prompt_token_ids=prompt,
            max_tokens=mt,
            min_tokens=d.int(0, mt) if stops and d.bool() else 0,
            eos_token_id=EOS if stops else None,
            ignore_eos=stops and d.bool(),
            stop_token_ids=STOP_TOKENS if stops and d.bool() else (),
            priority=d.int(0, 3) if cfg.policy == "priority" else 0,
            arrival_time=float(i),
        )
        arrival = d.int(0, spread) if i == 0 else d.int(out[-1].arrival_step, out[-1].arrival_step + spread // 2 + 1)
        spec = tuple((nd, d.int(0, nd)) for nd in (d.int(0, k) for _ in range(d.int(0, mt + 1)))) if proposals else ()
        out.append(WorkloadRequest(request, arrival, planted[i], spec))
    return tuple(out)


def _spec_threshold(d: Draw, k: int) -> int:
    """0 or at least 1 + k: below that vLLM 0.33.0 crashes on a padded admission (exp1), and the spec refuses it."""
    return d.choice([0, 0, d.int(max(1, 1 + k), 1 + k + 12)])


def prefix_caching(d: Draw) -> Workload:
    bs = d.choice([2, 4, 4, 8])
    L = d.int(32, 96)
    cfg = _config(
        d,
        budget=d.int(8, 64),
        seqs=d.int(1, 6),
        L=L,
        bs=bs,
        blocks=d.int(6, 24),
        policy=d.choice(["fcfs", "fcfs", "priority"]),
        long_prefill_token_threshold=d.choice([0, 0, d.int(1, 16)]),
        enable_prefix_caching=True,
    )
    return _runnable(Workload(cfg, _feature_requests(d, cfg, d.int(2, 6), 8, 6), max_steps=FEATURE_MAX_STEPS))


def spec_decode(d: Draw) -> Workload:
    k, bs = d.int(1, 4), d.choice([2, 4, 4, 8])
    L = d.int(16, 64)
    cfg = _config(
        d,
        budget=d.choice([d.int(2, 8), d.int(8, 48)]),
        seqs=d.int(1, 5),
        L=L,
        bs=bs,
        blocks=d.int(4, 24),
        long_prefill_token_threshold=min(_spec_threshold(d, k), L),
        enable_prefix_caching=d.bool(),
        num_speculative_tokens=k,
        policy=d.choice(["fcfs", "fcfs", "priority"]),
    )
    reqs = _feature_requests(d, cfg, d.int(1, 5), 12, 5, stops=d.bool(), proposals=True)
    return _runnable(Workload(cfg, reqs, max_steps=FEATURE_MAX_STEPS))


def async_scheduling(d: Draw) -> Workload:
    k, bs = d.choice([0, 0, d.int(1, 3)]), d.choice([2, 4, 8])
    L = d.int(24, 96)
    cfg = _config(
        d,
        budget=d.int(4, 64),
        seqs=d.int(1, 6),
        L=L,
        bs=bs,
        blocks=d.int(4, 14),
        long_prefill_token_threshold=min(_spec_threshold(d, k), L),
        enable_prefix_caching=d.bool(),
        num_speculative_tokens=k,
        async_scheduling=True,
        policy=d.choice(["fcfs", "fcfs", "priority"]),
    )
    reqs = _feature_requests(d, cfg, d.int(2, 5), d.choice([1, 3, 6, 12]), 5, stops=d.bool())
    abort_list = _some_mid_step(d, tuple(Abort(d.int(0, 12), r.request_id) for r in reqs if d.int(0, 3) == 0))
    return _runnable(Workload(cfg, reqs, abort_list, max_steps=FEATURE_MAX_STEPS))


# Each takes a draw; a stratified one (`strata`) also the stratum its index gives it in a campaign.
FAMILIES: dict[str, Callable[..., Workload]] = {
    "budget": budget,
    "threshold": threshold,
    "no-chunking": no_chunking,
    "kv-pressure": kv_pressure,
    "priority": priority,
    "max-model-len": max_model_len,
    "stops": stops,
    "aborts": aborts,
    "big-batch": big_batch,
    "prefix-caching": prefix_caching,
    "spec-decode": WithEdges(spec_decode),  # every fourth a release edge (families_edges.py)
    "async": async_scheduling,
    # Every knob at once (swarm testing), one family per policy and scheduling: the coverage map's other cells.
    **MIXED_FAMILIES,
    # The features deployments turn on, each over the mixed draw (deployment.py).
    **DEPLOYMENT_FAMILIES,
}


def family_needs(family: str) -> str | None:
    """The optional engine method (`spec.engine.FEATURE_METHODS`) the family's workloads call, if any."""
    return getattr(FAMILIES[family], "needs", None)


def generate(family: str, seed: int, index: int) -> Workload:
    """The `index`-th workload of `family` in the campaign seeded by `seed`: the same on every machine."""
    draw, make = RandomDraw(random.Random(f"{family}/{seed}/{index}")), FAMILIES[family]
    # A stratified family takes turns by index: the mixed ones between spec decode and prefix caching,
    # spec-decode between its own workloads and the release edges.
    strata = getattr(make, "strata", None)
    workload = make(draw, index % strata) if strata else make(draw)
    return workload.replace(
        name=workload_name(family, seed, index), description=f"family {family}, seed {seed}, index {index}"
    )


def workload_name(family: str, seed: int, index: int) -> str:
    """The name `generate` gives: what certificates, counterexample files and `schedspec merge` key workloads by."""
    return f"{family}-{seed}-{index}"


def at_release(workload: Workload, version: str) -> Workload:
    """`workload` as vLLM `version` can run it: its config's `vllm_version` set, and what that release refuses mapped.

    The families draw configs for the newest release (`spec.versions.DEFAULT_RELEASE`). A campaign against an
    older release (`certify --engine vllm==V`) runs the same plan, so that the same seed means the same
    workloads; a config V refuses (`spec/config.py:_validate_release`) is mapped to the nearest one it accepts,
    never skipped, and the change is appended to the description, so a counterexample says what was dropped:

    * `max_num_active_seqs` and `long_prefill_token_threshold_adaptive` do not exist before 0.31.0
      (vllm/config/scheduler.py:SchedulerConfig): set to their defaults (None, False), which is what the
      older releases do;
    * async scheduling with the CPU ngram drafter is refused before 0.33.0 (vllm/config/vllm.py:
      VllmConfig.__post_init__), which accepts the device's `ngram_gpu`: the drafter becomes `ngram_gpu`,
      which drafts alike and needs no slots either, so async spec decode is certified at every release;
    * spec decode with pipeline parallel before 0.33.0: those releases run spec decode on the V1 model runner,
      which vLLM says does not fully support async scheduling with PP (pp batches in flight, no decode cadence;
      vllm/config/vllm.py:VllmConfig.max_concurrent_batches): the pipeline becomes one stage;
    * LoRA under async scheduling before 0.33.0: those releases count only the scheduled running requests'
      adapters, so a request the async skip rule passes over lends its slot for a step, and when both adapters'
      requests are scheduled again vLLM fails its own `len(scheduled_loras) <= max_loras` assertion (the engine
      dies; `docs/features.md`, bugs the spec declares). Async is turned off, as for a crash the spec cannot
      certify around;
    * `release_kv_cache_memory` does not exist before 0.31.0 (vllm/v1/engine/core.py:EngineCore): those
      controls are dropped.

    Raises `SpecError` for a `version` outside `spec.versions.RELEASES`.
    """
    from ...spec.errors import SpecError
    from ...spec.versions import RELEASES, holds

    if version not in RELEASES:
        raise SpecError("vllm_version", version, f"must be one of {', '.join(RELEASES)}")
    c = workload.config
    changes: dict[str, object] = {}
    if not holds("active-seqs-and-adaptive-threshold", version):
        if c.max_num_active_seqs is not None:
            changes["max_num_active_seqs"] = None
        if c.long_prefill_token_threshold_adaptive:
            changes["long_prefill_token_threshold_adaptive"] = False
    if (
        not holds("async-with-ngram-spec-decode", version)
        and c.async_scheduling
        and c.num_speculative_tokens > 0
        and c.speculative_method == "ngram"
    ):
        changes["speculative_method"] = "ngram_gpu"
    if not holds("async-with-ngram-spec-decode", version) and c.pipeline_parallel_size > 1 and c.num_speculative_tokens:
        changes["pipeline_parallel_size"] = 1
    if not holds("loras-counted-over-all-running", version) and c.max_loras is not None and c.async_scheduling:
        changes["async_scheduling"] = False
    controls = workload.controls
    if not holds("release-kv-cache-memory", version):
        controls = tuple(x for x in controls if x.call != "release_kv_cache_memory")
    released = len(workload.controls) - len(controls)
    if c.vllm_version == version and not changes and not released:
        return workload
    config = dataclasses.replace(c, vllm_version=version, **changes)  # type: ignore[arg-type]
    description = workload.description
    if changes or released:
        dropped = ", ".join(
            [f"{k}={getattr(c, k)!r} -> {v!r}" for k, v in changes.items()]
            + ([f"{released} release_kv_cache_memory call(s) dropped"] if released else [])
        )
        description = f"{description}; mapped to vLLM {version}: {dropped}".lstrip("; ")
    return workload.replace(config=config, description=description, controls=controls)
