"""Families of the features deployments turn on beyond the core scheduler: structured output first.

Each family here puts one deployment feature on top of the `mixed-*` draw
(`mixed.py`: every knob at once, swarm-tested), so the feature meets
PRIORITY, async scheduling, spec decode, prefix caching, preemption and
aborts in the same workloads, and, in the strata where `mixed` turns spec
decode and prefix caching off, meets the core scheduler alone. A family is
stratified like the mixed ones: `generate` passes `index % 16`, which picks
the policy, the scheduling and the mixed stratum, so every mode of the
coverage map gets the same share.

* `lora`: `max_loras` 1 to 3 (mostly 1, and below `max_num_seqs`) and up to
  five adapters over about five requests in six, and three times in four a
  burst at one step (`max_loras + 1` adapters, the first again, none), where
  the limit bites at once; one draw in four without spec decode on two
  pipeline stages; so the limit passes requests over while others are
  admitted behind them, and prompts of one adapter share cached blocks
  that another adapter's identical prompts cannot hit.
* `pipeline-parallel`: `pp_size` 2 to 4 (mostly 2) over the whole draw:
  pp batches in flight (pp + 1 under async), and under async the decode
  cadence, which passes a request over until pp schedule() calls after
  its last decode, while prefills and other requests fill the step.
* `prefill-cadence`: `prefill_schedule_interval` 2 to 4, as a data-parallel
  rank whose DP engine core throttles the steps off its cadence, or (from
  0.33.0) as an engine that keeps the cadence itself; prefill chunks and
  admissions wait while decodes fill the step, unless the queue backs up.
* `pause-and-reset`: the engine core's calls outside schedule(), two to
  four of them: a cache reset that preempts every running request (their
  in-flight output dropped) and a pause, in either order, then more of
  either; pauses in each mode (abort, wait, keep) with and without the
  cache clear, resumed a few steps later, and `release_kv_cache_memory`
  while paused; one draw in eight a DP rank paused as a request arrives; so
  requests are preempted outside the step, admissions wait out a pause,
  and prefix hits vanish.
* `pooling`: a pooling model (`runner` "pooling") over the draw with spec
  decode off: every request pools its prompt and samples nothing, so it
  finishes in the update of the step whose chunk ends at the prompt's end;
  one request in four has a prompt of exactly `max_model_len` (where the
  pool holds one), which only a model that keeps no slot for a sampled
  token can finish (0.32.0 on; before, it stalls until `max_steps`), and
  one in three skips reading the prefix cache (a pooling task over every
  token) while still caching what it computes.
* `structured-output`: about half the requests carry a grammar
  (`spec.workload.Grammar`), most ready at arrival or a step or two after,
  some many steps later, one in five failing to compile. A grammar ready
  at arrival is admitted in its first step, as in vLLM when the compile is
  cached; a late one makes the waiting pass skip the request, over and
  over, with others admitted past it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ...spec.config import SchedulerConfig
from ...spec.controls import Control
from ...spec.request import Request
from ...spec.versions import holds
from ...spec.workload import Grammar, Workload, WorkloadRequest
from .mixed import mixed

if TYPE_CHECKING:
    from .draw import Draw


def with_grammars(d: Draw, workload: Workload) -> Workload:
    """`workload` with a grammar on about half its requests: ready 0, 1, 2 or 3-12 steps after arrival (capped
    below `max_steps`, so every grammar finishes its compile), one in five failing."""
    requests = []
    for r in workload.requests:
        if d.bool():
            delay = d.choice([0, 0, 1, 2, d.int(3, 12)])
            grammar = Grammar(min(r.arrival_step + delay, workload.max_steps - 1), fails=d.int(0, 4) == 0)
            r = dataclasses.replace(r, grammar=grammar)
        requests.append(r)
    return workload.replace(requests=tuple(requests))


def with_adapters(d: Draw, workload: Workload) -> Workload:
    """`workload` with LoRA: `max_loras` 1 to 3 (mostly 1; below `max_num_seqs`, so the running requests can fill
    it), and about five requests in six naming one of `max_loras + 2` adapters, so the limit bites and the same
    adapter's prompts share cached blocks; most draws add a burst of `max_loras + 1` adapters at one step, and one
    in four without spec decode runs on two pipeline stages."""
    # Below max_num_seqs, or the running requests could never hold max_loras adapters and the limit never bites.
    max_loras = min(d.choice([1, 1, 2, 3]), max(1, workload.config.max_num_seqs - 1))
    requests = []
    for r in workload.requests:
        if d.int(0, 5) > 0:
            r = dataclasses.replace(r, request=dataclasses.replace(r.request, lora_int_id=d.int(1, max_loras + 2)))
        requests.append(r)
    if d.int(0, 3) > 0:  # a burst at one step, in queue order: an adapter, others, the first again, none
        at = d.int(0, max(r.arrival_step for r in workload.requests))
        first, second = d.int(1, max_loras + 2), d.int(1, max_loras + 2)
        # As many more adapters as it takes to exceed the limit (none at max_loras 1 if the two differ).
        more = [a for a in range(1, max_loras + 3) if a not in (first, second)][: max_loras + 1 - len({first, second})]
        for i, lora in enumerate((first, second, *more, first, 0)):
            prompt = tuple(d.int(10, 15) for _ in range(d.int(1, 4)))
            burst = Request(f"lora{i}", prompt, d.int(1, 4), priority=0, arrival_time=float(1000 + i), lora_int_id=lora)
            requests.append(WorkloadRequest(burst, at))
    config = dataclasses.replace(workload.config, max_loras=max_loras)
    max_steps = workload.max_steps
    if d.int(0, 3) == 0 and config.num_speculative_tokens == 0:
        # One draw in four on two pipeline stages: a request whose step is in flight is not scheduled, yet holds
        # its adapter, which releases before 0.33.0 do not count (`loras-counted-over-all-running`).
        config, max_steps = dataclasses.replace(config, pipeline_parallel_size=2), max_steps * 2
    return workload.replace(config=config, requests=tuple(requests), max_steps=max_steps)


def with_pooling(d: Draw, workload: Workload) -> Workload:
    """`workload` on a pooling model: spec decode off, each request with max_tokens 1 and nothing planted, one in four
    grown to a prompt of exactly `max_model_len` where the pool holds that many tokens, one in three skipping the
    prefix cache's read."""
    config = dataclasses.replace(workload.config, runner="pooling", num_speculative_tokens=0)
    L, bs = config.max_model_len, config.block_size
    fits = -(-L // bs) <= config.num_usable_blocks
    requests = []
    for r in workload.requests:
        prompt = r.request.prompt_token_ids
        if fits and d.int(0, 3) == 0:
            prompt += tuple(d.int(10, 15) for _ in range(L - len(prompt)))
        request = dataclasses.replace(
            r.request,
            prompt_token_ids=prompt,
            max_tokens=1,
            min_tokens=0,
            skip_reading_prefix_cache=d.int(0, 2) == 0,
        )
        requests.append(WorkloadRequest(request, r.arrival_step))
    return workload.replace(config=config, requests=tuple(requests))


def with_pipeline_parallel(d: Draw, workload: Workload) -> Workload:
    """`workload` under pipeline parallel: `pp_size` 2 to 4, so 2 to 5 batches are in flight and, under async
    scheduling, each request decodes every pp-th schedule(). Synchronous spec decode under PP is outside the spec
    (`SchedulerConfig`), so a spec-decode draw runs async. A synchronous PRIORITY draw, and one synchronous FCFS
    draw in three, is instead the episode of `victim_in_flight`, in the draw's policy and caching."""
    c = workload.config
    pp = d.choice([2, 2, 3, 4])
    async_scheduling = c.async_scheduling or c.num_speculative_tokens > 0
    config = dataclasses.replace(c, pipeline_parallel_size=pp, async_scheduling=async_scheduling)
    if not async_scheduling and (config.policy == "priority" or d.int(0, 2) == 0):
        return victim_in_flight(d, config)
    return workload.replace(config=config, max_steps=workload.max_steps * pp)


def victim_in_flight(d: Draw, config: SchedulerConfig) -> Workload:
    """A request decoding in flight, then better ones whose prefill chunks run out of blocks behind it.

    Under synchronous PP the running pass passes over a request whose step is in flight (it owes nothing
    until the output is back). `r0` arrives first and decodes; two or three requests of a better priority
    arrive behind it with long prompts, cut into chunks by the threshold, in a pool too small for all of them.
    When a chunk finds no blocks, PRIORITY preempts `r0`, the worst key, which the pass has just passed
    over (`preempt_skipped`); FCFS preempts the tail instead.
    """
    # Measured over 30 draws each: 7 blocks of 4 with a threshold of 2 give the PRIORITY episode in 24.
    config = _episode_config(
        config, num_gpu_blocks=d.choice([6, 7, 7, 8]), max_model_len=32, long_prefill_token_threshold=2
    )
    first = Request("r0", tuple(d.int(10, 15) for _ in range(d.int(2, 5))), d.int(12, 20), priority=5, arrival_time=0.0)
    requests = [WorkloadRequest(first, 0)]
    for i in range(1, d.int(3, 4)):
        prompt = tuple(d.int(10, 15) for _ in range(d.int(8, 16)))
        requests.append(
            WorkloadRequest(Request(f"r{i}", prompt, d.int(2, 4), priority=0, arrival_time=float(i)), d.int(1, 3))
        )
    return Workload(config, tuple(requests), max_steps=160)


def _episode_config(config: SchedulerConfig, **knobs: object) -> SchedulerConfig:
    """An episode's config: the mixed draw's modes (policy, async, spec decode, caching, release) kept, the knobs an
    episode is measured against pinned (blocks of 4, a budget of 32, four sequences, no watermark, no other limit),
    and `knobs` on top."""
    pinned: dict[str, object] = {
        "block_size": 4,
        "max_num_batched_tokens": 32,
        "max_num_seqs": 4,
        "long_prefill_token_threshold_adaptive": False,
        "scheduler_reserve_full_isl": False,
        "watermark": 0.0,
        "max_num_scheduled_tokens": None,
        "max_num_active_seqs": None,
    }
    return dataclasses.replace(config, **{**pinned, **knobs})  # type: ignore[arg-type]


def with_controls(d: Draw, workload: Workload) -> Workload:
    """`workload` with two to four of the engine core's calls outside schedule() (`spec.controls`), from the first
    steps to a few after the last arrival: a cache reset with the running requests and a pause, in either order,
    then up to two more of any kind (a reset with the running requests or without, a pause); a pause is in any
    mode (abort the least often), with or without the cache clear, and resumed 1 to 8 steps later; one pause in
    three releases the KV cache memory while it holds (0.31.0 on). One draw in eight is instead `paused_dp_rank`."""
    last = max(r.arrival_step for r in workload.requests)
    release = holds("release-kv-cache-memory", workload.config.vllm_version)
    controls: list[Control] = []
    step = d.int(0, max(1, last))
    kinds = ["reset", "pause"] if d.bool() else ["pause", "reset"]
    kinds += [d.choice(["reset", "reset", "reset-alone", "pause", "pause"]) for _ in range(d.int(0, 2))]
    for kind in kinds:
        if kind != "pause":
            controls.append(Control(step, "reset_prefix_cache", reset_running_requests=kind == "reset"))
        else:
            mode = d.choice(["abort", "wait", "wait", "keep", "keep"])
            controls.append(Control(step, "pause", mode=mode, clear_cache=d.bool()))
            hold = d.int(1, 8)
            if release and d.int(0, 2) == 0:
                controls.append(Control(step + d.int(0, hold), "release_kv_cache_memory"))
            step += hold
            controls.append(Control(step, "resume"))
        step += d.int(1, 6)
    workload = workload.replace(controls=tuple(controls))
    if d.int(0, 7) == 0:
        return paused_dp_rank(d, workload)
    return workload


def paused_dp_rank(d: Draw, workload: Workload) -> Workload:
    """A data-parallel rank (prefill cadence 2, its odd steps throttled) paused in mode wait while a request arrives.

    `a` arrives alone and decodes. A pause in mode wait (PAUSED_NEW) at step 1 holds new admissions; `b` arrives at
    step 2, a step on the cadence, and the resume comes at step 3 or 5, a throttled one. From 0.32.0 the paused
    step's waiting pass runs and takes nobody, and records that the queue could not drain, so the throttled step
    of the resume admits `b`; before, the pass does not run under the pause, and `b` waits while `a` decodes until
    the next step on the cadence (`paused-new-runs-waiting-pass`). In the draw's policy, scheduling, spec decode
    and caching.
    """
    config = _episode_config(
        workload.config,
        num_gpu_blocks=d.int(24, 40),
        max_model_len=32,
        long_prefill_token_threshold=0,
        prefill_schedule_interval=2,
        data_parallel_size=2,
    )
    a = Request("a", tuple(d.int(10, 15) for _ in range(d.int(2, 5))), d.int(10, 14), ignore_eos=True)
    b = Request("b", tuple(d.int(10, 15) for _ in range(d.int(4, 8))), d.int(1, 3), ignore_eos=True, arrival_time=1.0)
    controls = (Control(1, "pause", mode="wait", clear_cache=False), Control(d.choice([3, 5]), "resume"))
    return Workload(
        config,
        (WorkloadRequest(a, 0), WorkloadRequest(b, 2)),
        max_steps=60,
        throttle_prefills=tuple(range(1, 60, 2)),
        controls=controls,
    )


def with_prefill_cadence(d: Draw, workload: Workload) -> Workload:
    """`workload` with `prefill_schedule_interval` 2 to 4. Half the draws are a data-parallel rank
    (`data_parallel_size` 2), whose DP engine core throttles every step off its cadence (`step % interval != 0`,
    the counter all ranks share, here never reset by an idle wave); the other half keep the cadence themselves,
    which only 0.33.0 does (`local-prefill-cadence`: older releases ignore the knob without DP). Half the PRIORITY
    draws are instead the episode of `held_chunk_preempted`, in the draw's modes."""
    interval = d.choice([2, 2, 3, 4])
    config = dataclasses.replace(workload.config, prefill_schedule_interval=interval)
    if config.policy == "priority" and d.bool():
        return held_chunk_preempted(d, config)
    if not d.bool():
        return workload.replace(config=config)
    config = dataclasses.replace(config, data_parallel_size=2)
    horizon = min(workload.max_steps, MAX_THROTTLED_STEPS * interval // (interval - 1))
    throttled = tuple(s for s in range(horizon) if s % interval)
    return workload.replace(config=config, throttle_prefills=throttled)


def held_chunk_preempted(d: Draw, config: SchedulerConfig) -> Workload:
    """A DP rank's throttled steps hold a long prompt's chunks back while a decode behind it grows into a full pool.

    `low` (a worse priority) arrives alone and is admitted first; `high` arrives a step later and is admitted
    behind it in `running`. From step 2 every step is throttled, so the pass passes over `low`'s next chunk, and
    when `high`'s decode needs a block the pool has none: PRIORITY preempts `low`, a request the pass has already
    passed over (`preempt_skipped`), in the synchronous spec-decode modes too, where nothing else skips.
    """
    config = _episode_config(
        config,
        num_gpu_blocks=d.int(5, 6),
        max_model_len=64,
        long_prefill_token_threshold=4,
        enable_chunked_prefill=True,
        data_parallel_size=2,
    )
    low = Request("low", tuple(d.int(10, 15) for _ in range(d.int(12, 20))), 4, priority=5, arrival_time=0.0)
    high = Request(
        "high", tuple(d.int(10, 15) for _ in range(d.int(1, 3))), d.int(12, 20), priority=0, arrival_time=1.0
    )
    # A one-token companion arrives with `low`, so two are eligible and the threshold cuts `low` into chunks (a lone
    # request is never cut, from 0.31.0); its priority is the worst, so it runs behind `low` and finishes at once.
    companion = Request("companion", (d.int(10, 15),), 1, priority=9, arrival_time=0.5)
    requests = (WorkloadRequest(low, 0), WorkloadRequest(companion, 0), WorkloadRequest(high, 1))
    return Workload(config, requests, max_steps=120, throttle_prefills=tuple(range(2, 60)))


MAX_THROTTLED_STEPS = 400  # a workload file stays small; past them every step is on the cadence


class DeploymentFamily:
    """A deployment feature over the mixed draw. `stratum` (0..15): the policy (bit 3), async (bit 2), and the
    mixed stratum (bits 0-1: spec decode, prefix caching); Hypothesis calls it with a draw alone and they are
    drawn."""

    strata = 16

    def __init__(self, name: str, add, needs: str) -> None:  # noqa: ANN001 - a (Draw, Workload) -> Workload
        self.add, self.needs = add, needs  # `needs`: the engine method the feature reaches it by
        self.__name__ = name.replace("-", "_")

    def __call__(self, d: Draw, stratum: int | None = None) -> Workload:
        s = d.int(0, 15) if stratum is None else stratum
        base = mixed(d, "priority" if s & 8 else "fcfs", bool(s & 4), s & 3)
        return self.add(d, base)


DEPLOYMENT_FAMILIES: dict[str, DeploymentFamily] = {
    "structured-output": DeploymentFamily("structured-output", with_grammars, "grammar_compiled"),
    "lora": DeploymentFamily("lora", with_adapters, "lora"),
    "pipeline-parallel": DeploymentFamily("pipeline-parallel", with_pipeline_parallel, "pipeline-parallel"),
    "prefill-cadence": DeploymentFamily("prefill-cadence", with_prefill_cadence, "prefill-cadence"),
    "pause-and-reset": DeploymentFamily("pause-and-reset", with_controls, "reset_prefix_cache"),
    "pooling": DeploymentFamily("pooling", with_pooling, "pooling"),
}
