"""What the state machine draws: bounds, configs and requests vLLM 0.33.0 accepts.

Every strategy has a fixed shape (see `state_machine`'s docstring for why),
and the knobs of the three features (prefix caching, spec decode, async
scheduling) are drawn only when `Bounds.features` is
on, so the core-scope machine draws exactly what it drew before them. All
prompts are the same token, so under prefix caching every request shares a
prefix with every other: hits, shared blocks and evictions are routine.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from hypothesis import strategies as st

from ...spec.arith import cdiv
from ...spec.config import SchedulerConfig
from ...spec.request import Request
from ...spec.workload import WorkloadRequest

EOS, STOP_TOKENS, FILLER = 2, (5, 6), 7
# Plain tokens first (Hypothesis shrinks towards the front), five of them to three that may stop:
# stops are common, yet requests live long enough to crowd the cache.
VOCAB = (FILLER, 8, 9, 10, 11, EOS, *STOP_TOKENS)


@dataclass(frozen=True)
class Bounds:
    """How big a drawn world may get. Small on purpose: a few blocks make preemption routine."""

    max_model_len: tuple[int, int] = (4, 16)
    block_sizes: tuple[int, ...] = (2, 1, 4, 8)
    # Usable blocks hold between one and this many max_model_len sequences. vLLM refuses to start unless
    # one fits (vllm/v1/core/kv_cache_planning.py:check_enough_kv_cache_memory); with fewer, a long request only
    # livelocks.
    max_sequences_in_cache: int = 2
    max_num_seqs: int = 5
    max_tokens: int = 40
    max_planted: int = 12  # planted samples per request; the filler token follows
    max_priority: int = 3
    # Arrivals and aborts between two steps. Hypothesis's swarm testing disables `step` in about half of all
    # runs; the cap turns such a run into a short invalid one instead of thirty arrivals nobody schedules.
    max_events_between_steps: int = 4
    # Prefix caching, spec decode (k up to this) and async scheduling, drawn per run. Off by default, so
    # that the core-scope draws keep their shape, and with it every example Hypothesis finds.
    features: bool = False
    max_speculative_tokens: int = 2
    max_proposals: int = 6
    # Async: how many steps may be in flight when schedule() runs is batch_queue_size - 1. vLLM's engine with
    # PP = 1 has 2; a pipeline of two stages (V2 runner) has 3, and then a victim's output can still be in
    # flight at the next schedule(), which is what makes the stale-output skip (and bug-zoo Z5) reachable.
    batch_queue_sizes: tuple[int, ...] = (2, 3)


def _scaled(value: int, n_max: int, n: int) -> int:
    """`value`, drawn in 0..n_max, scaled to 0..n: a drawn range never depends on an earlier draw."""
    return value * n // max(n_max, 1)


@cache
def raw_draws(b: Bounds) -> tuple[st.SearchStrategy, st.SearchStrategy]:
    """Fixed-shape strategies, built once per bounds (building them per draw cost more than the reference)."""
    l_hi, big = b.max_model_len[1], 4 * b.max_model_len[1]
    config = st.tuples(
        st.integers(*b.max_model_len),
        st.sampled_from(b.block_sizes),
        st.integers(1, b.max_num_seqs),
        st.booleans(),
        st.integers(0, big),
        st.integers(0, big),
        st.booleans(),
        st.integers(0, l_hi),
        st.booleans(),
        st.integers(1, b.max_num_seqs),
        st.booleans(),
        st.sampled_from(("fcfs", "priority")),
        st.sampled_from((0.0, 0.1, 0.3)),
        st.booleans(),
    )
    request = st.tuples(
        st.integers(0, l_hi),
        st.integers(1, b.max_tokens),
        st.integers(0, b.max_tokens),
        st.integers(0, b.max_priority),
        st.integers(0, 2 * b.max_priority),
        st.sampled_from((EOS, None)),
        st.booleans(),
        st.sampled_from(((), STOP_TOKENS, STOP_TOKENS[:1])),
        st.lists(st.sampled_from(VOCAB), max_size=b.max_planted),
    )
    if b.features:
        k = b.max_speculative_tokens
        config = st.tuples(
            config, st.booleans(), st.integers(0, k), st.booleans(), st.sampled_from(b.batch_queue_sizes)
        )
        request = st.tuples(
            request, st.lists(st.tuples(st.integers(0, k), st.integers(0, k)), max_size=b.max_proposals)
        )
    return config, request


def make_config(raw: tuple, b: Bounds) -> SchedulerConfig:
    """A config vLLM 0.33.0 accepts (`SchedulerConfig` validates as vLLM does), tilted towards tight KV."""
    features: dict = {}
    if b.features:
        raw, caching, k, async_scheduling, _ = raw
        features = dict(enable_prefix_caching=caching, num_speculative_tokens=k, async_scheduling=async_scheduling)
    L, bs, seqs, unchunked, budget, blocks, thr_on, thr, adaptive, active, active_on, policy, watermark, no_isl = raw
    big = 4 * b.max_model_len[1]
    lo = max(seqs, L if unchunked else 1)  # verify_max_model_len: budget >= max_num_seqs, and >= L unchunked
    need = cdiv(L, bs)
    threshold = 1 + _scaled(thr, b.max_model_len[1], L - 1) if thr_on else 0
    k = features.get("num_speculative_tokens", 0)
    if 1 <= threshold < 1 + k:  # vLLM 0.33.0 crashes there (exp1) and the spec refuses it: lift it to 1 + k
        threshold = 1 + k if 1 + k <= L else 0
    return SchedulerConfig(
        max_num_batched_tokens=lo + _scaled(budget, big, 2 * L),
        max_num_seqs=seqs,
        max_model_len=L,
        block_size=bs,
        num_gpu_blocks=1 + need + _scaled(blocks, big, (b.max_sequences_in_cache - 1) * need),
        long_prefill_token_threshold=threshold,
        long_prefill_token_threshold_adaptive=threshold > 0 and adaptive,
        enable_chunked_prefill=not unchunked,
        policy=policy,
        watermark=watermark,
        scheduler_reserve_full_isl=not no_isl,
        max_num_active_seqs=min(active, seqs) if active_on else None,
        **features,
    )


def batch_queue_size(raw: tuple, b: Bounds) -> int:
    """The drawn batch queue of an async run (1 for a synchronous one: nothing stays in flight)."""
    return raw[4] if b.features and raw[3] else 1


def make_request(raw: tuple, config: SchedulerConfig, b: Bounds, index: int, step: int) -> WorkloadRequest:
    """A request vLLM's input processing admits (1 <= prompt < L, min_tokens <= max_tokens), with its samples."""
    proposals: tuple[tuple[int, int], ...] = ()
    if b.features:
        raw, drawn = raw
        k = config.num_speculative_tokens  # (drafts, accepted) drawn in 0..max, scaled to 0..k and 0..drafts
        drafts = [_scaled(d, b.max_speculative_tokens, k) for d, _ in drawn]
        proposals = tuple((d, _scaled(a, b.max_speculative_tokens, d)) for d, (_, a) in zip(drafts, drawn)) if k else ()
    prompt, max_tokens, min_tokens, priority, arrival, eos, ignore_eos, stops, planted = raw
    fcfs = config.policy == "fcfs"  # vLLM rejects a nonzero priority unless the policy is PRIORITY
    request = Request(
        request_id=f"r{index}",
        prompt_token_ids=(10,) * (1 + _scaled(prompt, b.max_model_len[1], config.max_model_len - 2)),
        # max_tokens may exceed L - prompt: the max_model_len cap must then win, whatever min_tokens says (Z4).
        max_tokens=max_tokens,
        min_tokens=min(min_tokens, max_tokens),
        eos_token_id=eos,
        ignore_eos=ignore_eos,
        stop_token_ids=stops,
        priority=0 if fcfs else priority,
        # vLLM stamps arrival on receipt; under PRIORITY, ties and reorderings reach the (priority, arrival) tie-break.
        arrival_time=float(index if fcfs else arrival),
    )
    return WorkloadRequest(request, step, tuple(planted), proposals)
