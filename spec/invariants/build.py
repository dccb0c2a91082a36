"""Concrete `StepView`s: from full scheduler states, or from any engine's trace.

From states (the reference, CrossHair, the Hypothesis state machine) every
field is read directly, ref counts and the prefix cache included. From a
trace, which holds only what every engine can expose, `replay.TraceReplay`
reconstructs the rest (see there): the state `schedule()` started from, the
block tables, and the drafts and async counters that the summary leaves out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..block_hash import block_hashes, chain_seed
from ..config import SchedulerConfig
from ..output import ModelRunnerOutput, SchedulerOutput
from ..request import GRAMMAR_COMPILED, GRAMMAR_FAILED, Request, RequestStatus
from ..rules import lora_counts_every_running, waits_for_grammar
from ..state import RequestState, SchedulerState
from ..trace import FinishedRequest
from ..versions import holds
from .views import Row, StepView


@dataclass(frozen=True)
class Counts:
    """One live request's numbers on one side of a step."""

    status: RequestStatus | None
    num_computed_tokens: int
    num_tokens: int
    num_blocks: int
    num_spec_tokens: int = 0
    num_output_placeholders: int = 0
    num_in_flight_tokens: int = 0
    num_stale_output_tokens: int = 0
    grammar: str | None = None  # structured output: as schedule() finds it (spec.request.GRAMMAR_STATES)


@dataclass(frozen=True)
class Blocks:
    """What a view knows about block ids after the step: "" for every problem when all is well."""

    ids_problem: str = ""
    num_shared_refs: int = 0
    refs_problem: str = ""
    cache_problem: str = ""


def arrival_ranks(requests: Mapping[str, Request]) -> dict[str, int]:
    times = sorted({r.arrival_time for r in requests.values()})
    rank = {t: i for i, t in enumerate(times)}
    return {rid: rank[r.arrival_time] for rid, r in requests.items()}


def _pos(queue: tuple[str, ...]) -> dict[str, int]:
    return {rid: i for i, rid in enumerate(queue)}


def make_view(
    config: SchedulerConfig,
    requests: Mapping[str, Request],
    pre: Mapping[str, Counts],
    post: Mapping[str, Counts],
    pre_queues: tuple[tuple[str, ...], tuple[str, ...]],
    post_queues: tuple[tuple[str, ...], tuple[str, ...]],
    out: SchedulerOutput,
    pre_free: int,
    post_free: int,
    blocks: Blocks = Blocks(),
    model_output: ModelRunnerOutput | None = None,
    finished: Mapping[str, FinishedRequest] | None = None,
    ranks: Mapping[str, int] | None = None,
    post_num_skipped_waiting: int = 0,
    cadence_waits: frozenset[str] = frozenset(),
    prefill_chunks: frozenset[str] = frozenset(),
    aborted_mid_step: frozenset[str] | None = None,
) -> StepView:
    """`model_output` is the output update_from_output absorbed in this step (None: no update).

    `ranks` is `arrival_ranks(requests)`, which a caller whose `requests` never change (a trace's replay: the
    whole workload) computes once: sorting every arrival time at every step made a check quadratic in the requests.
    """
    ranks = ranks if ranks is not None else arrival_ranks(requests)
    pre_run, pre_wait = (_pos(q) for q in pre_queues)
    post_run, post_wait = (_pos(q) for q in post_queues)
    hits = {n.req_id: n.num_computed_tokens for n in out.scheduled_new_reqs}

    def cut_short(rid: str) -> bool:
        """Finished after the model ran and before the update, from outside: an abort mid-step (`aborted_mid_step`:
        the record's list; without one, as states give it, any FINISHED_ABORTED)."""
        if finished is None or rid not in finished:
            return False
        if aborted_mid_step is not None:
            return rid in aborted_mid_step
        return finished[rid].status == RequestStatus.FINISHED_ABORTED

    rows = []
    lora_full = _lora_full(config, requests, pre_run, out)
    for rid in dict.fromkeys([*pre, *post]):
        q = requests[rid]
        s0 = pre.get(rid, Counts(None, 0, q.num_prompt_tokens, 0))
        s1 = post.get(rid, Counts(None, 0, 0, 0))
        rows.append(
            Row(
                request_id=rid,
                num_prompt_tokens=q.num_prompt_tokens,
                max_tokens=q.max_tokens,
                min_tokens=q.min_tokens,
                priority=q.priority,
                arrival=ranks[rid],
                pre_live=rid in pre,
                pre_running=rid in pre_run,
                pre_waiting=rid in pre_wait,
                pre_preempted=s0.status == RequestStatus.PREEMPTED,
                pre_run_pos=pre_run.get(rid, -1),
                pre_wait_pos=pre_wait.get(rid, -1),
                pre_num_computed_tokens=s0.num_computed_tokens,
                pre_num_tokens=s0.num_tokens,
                pre_num_blocks=s0.num_blocks,
                scheduled=rid in out.num_scheduled_tokens,
                num_scheduled=out.num_scheduled_tokens.get(rid, 0),
                admitted=rid in hits,
                preempted=rid in out.preempted_req_ids,
                post_live=rid in post,
                post_running=rid in post_run,
                post_waiting=rid in post_wait,
                post_run_pos=post_run.get(rid, -1),
                post_wait_pos=post_wait.get(rid, -1),
                post_num_computed_tokens=s1.num_computed_tokens,
                post_num_tokens=s1.num_tokens,
                post_num_blocks=s1.num_blocks,
                post_num_spec_tokens=s1.num_spec_tokens,
                post_num_output_placeholders=s1.num_output_placeholders,
                pre_num_spec_tokens=s0.num_spec_tokens,
                pre_num_output_placeholders=s0.num_output_placeholders,
                pre_num_stale_output_tokens=s0.num_stale_output_tokens,
                pre_grammar_wait=s0.status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR,
                pre_blocked=waits_for_grammar(
                    s0.status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR, s0.grammar == GRAMMAR_COMPILED
                ),
                pre_grammar_failed=s0.status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
                and s0.grammar == GRAMMAR_FAILED,
                post_in_skipped_queue=0 <= post_wait.get(rid, -1) < post_num_skipped_waiting,
                pre_cadence_wait=rid in cadence_waits,
                pre_prefill_chunk=rid in prefill_chunks,
                lora_waits=lora_full is not None and 0 < q.lora_int_id and q.lora_int_id not in lora_full,
                num_scheduled_spec=len(out.scheduled_spec_decode_tokens.get(rid, ())),
                num_hit_tokens=hits.get(rid, 0),
                skip_reading_prefix_cache=q.skip_reading_prefix_cache,
                post_num_in_flight_tokens=s1.num_in_flight_tokens,
                post_num_stale_output_tokens=s1.num_stale_output_tokens,
                # A request aborted mid-step kept none of its tokens: the update passed it over.
                sampled_stop=sampled_stop(
                    q, model_output, rid, s0.num_tokens, config.max_model_len, config.vllm_version
                )
                and not cut_short(rid),
                finished_stopped=finished is not None
                and rid in finished
                and finished[rid].status == RequestStatus.FINISHED_STOPPED
                and not cut_short(rid),
                # Live before the step (an abort before schedule() leaves no row), finished by the abort.
                aborted_mid_step=cut_short(rid),
            )
        )
    return StepView(
        rows=tuple(rows),
        token_budget=config.token_budget,
        max_num_seqs=config.max_num_seqs,
        max_model_len=config.max_model_len,
        block_size=config.block_size,
        num_usable_blocks=config.num_usable_blocks,
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        threshold_adaptive=config.long_prefill_token_threshold_adaptive,
        fcfs=config.policy == "fcfs",
        pre_num_free_blocks=pre_free,
        post_num_free_blocks=post_free,
        ids_consistent=not blocks.ids_problem,
        ids_problem=blocks.ids_problem,
        enable_prefix_caching=config.enable_prefix_caching,
        num_speculative_tokens=config.num_speculative_tokens,
        async_scheduling=config.async_scheduling,
        pipeline_parallel_size=config.pipeline_parallel_size,
        num_sampled_tokens_per_step=config.num_sampled_tokens_per_step,
        vllm_version=config.vllm_version,
        post_num_shared_block_refs=blocks.num_shared_refs,
        refs_consistent=not blocks.refs_problem,
        refs_problem=blocks.refs_problem,
        cache_consistent=not blocks.cache_problem,
        cache_problem=blocks.cache_problem,
        watermark_blocks=config.watermark_blocks,
        enable_chunked_prefill=config.enable_chunked_prefill,
        scheduler_reserve_full_isl=config.scheduler_reserve_full_isl,
    )


def sampled_stop(
    request: Request,
    model_output: ModelRunnerOutput | None,
    rid: str,
    num_tokens: int,
    max_model_len: int,
    release: str,
) -> bool:
    """Whether the tokens the request kept end in its EOS or a stop token.

    With drafts a step returns several tokens, appended one by one with a
    stop check after each (vllm/v1/core/sched/utils.py:check_stop): a length cap reached on an
    earlier token trims the rest, stop token included. `num_tokens` is T
    before the update, which schedule() never changes. Before 0.29.0 no stop
    applies below min_tokens (`min-tokens-gates-every-stop`).

    Stated here on its own, not through `rules.stop_kind`: `stop-token-finishes`
    checks the order of the stop checks, so it must not read it from the rule.
    """
    tokens = model_output.sampled_token_ids.get(rid, ()) if model_output is not None else ()
    num_outputs = num_tokens - request.num_prompt_tokens
    gated = not holds("min-tokens-gates-every-stop", release)
    for t in tokens:
        num_outputs += 1
        if gated and num_outputs < request.min_tokens:
            continue
        if t == request.effective_eos_token_id or t in request.stop_token_ids:
            return True
        if request.num_prompt_tokens + num_outputs >= max_model_len or num_outputs >= request.max_tokens:
            return False
    return False


def _lora_full(
    config: SchedulerConfig, requests: Mapping[str, Request], pre_run: Mapping[str, int], out: SchedulerOutput
) -> set[int] | None:
    """The adapters holding LoRA slots as schedule() ends (the running pass's survivors and the admissions, before
    any finishes in the update), if all max_loras of them are taken; None otherwise."""
    if config.max_loras is None:
        return None
    every = lora_counts_every_running(config.vllm_version)
    running = [rid for rid in pre_run if rid not in out.preempted_req_ids] + [n.req_id for n in out.scheduled_new_reqs]
    holders = [rid for rid in running if every or rid in out.num_scheduled_tokens]
    adapters = {requests[rid].lora_int_id for rid in holders if requests[rid].lora_int_id > 0}
    return adapters if len(adapters) >= config.max_loras else None


def counts_of(r: RequestState) -> Counts:
    return Counts(
        r.status,
        r.num_computed_tokens,
        r.num_tokens,
        len(r.block_ids),
        len(r.spec_token_ids),
        r.num_output_placeholders,
        r.num_in_flight_tokens,
        r.num_stale_output_tokens,
        r.grammar,
    )


def ids_problem(
    held: Mapping[str, tuple[int, ...]], free: tuple[int, ...] | None, num_gpu_blocks: int, shared_ok: bool = False
) -> str:
    """Block ids in range, a block held twice only where prefix caching shares it, none both free and held."""
    owner: dict[int, str] = {}
    for rid, blocks in held.items():
        for b in blocks:
            if not 0 < b < num_gpu_blocks:
                return f"request {rid} holds block {b}, outside 1..{num_gpu_blocks - 1}"
            if b in owner and (not shared_ok or owner[b] == rid):
                return f"block {b} is held by both {owner[b]} and {rid}"
            owner.setdefault(b, rid)
    if free is not None:
        if len(set(free)) != len(free):
            return "the free queue holds a block twice"
        both = set(free) & set(owner)
        if both:
            b = min(both)
            return f"block {b} is free and held by {owner[b]}"
    return ""


def shared_refs(held: Mapping[str, tuple[int, ...]]) -> int:
    entries = [b for blocks in held.values() for b in blocks]
    return len(entries) - len(set(entries))


def refs_problem(s: SchedulerState) -> str:
    """block_pool.py: ref_cnt counts the block tables holding a block, and the free queue is exactly the ref-0 blocks."""
    if s.block_ref_cnt is None:  # derived from the tables: nothing stored that could disagree
        return ""
    holders: dict[int, int] = {}
    for _, b in s.held_blocks():
        holders[b] = holders.get(b, 0) + 1
    for b in sorted(set(holders) | set(s.block_ref_cnt)):
        if s.block_ref_cnt.get(b, 0) != holders.get(b, 0):
            return f"block {b} has ref count {s.block_ref_cnt.get(b, 0)} but {holders.get(b, 0)} block tables hold it"
    free = set(s.free_block_queue)
    lost = set(range(1, s.config.num_gpu_blocks)) - free - set(holders)
    if lost:
        return f"block {min(lost)} is neither free nor referenced"
    return ""


def cache_problem(s: SchedulerState) -> str:
    """vllm/v1/core/single_type_kv_cache_manager.py:SingleTypeKVCacheManager.cache_blocks: a request's first num_cached_blocks blocks are cached under the hashes of
    its own tokens, and no later block of its table is cached (a reused block forgets its old hash)."""
    hash_of = s.block_hash_of()
    if sum(map(len, s.cached_block_hash_to_block.values())) != len(hash_of):
        return "a block is cached under two hashes"
    if not hash_of and all(r.num_cached_blocks == 0 for r in s.requests.values()):
        return ""
    bs = s.config.block_size
    for rid, r in s.requests.items():
        tokens = r.request.prompt_token_ids + r.output_token_ids
        hashes = block_hashes(tokens, bs, seed=chain_seed(r.request.lora_int_id))
        if r.num_cached_blocks > min(len(r.block_ids), len(hashes)):
            return f"{rid} has {r.num_cached_blocks} cached blocks but {len(hashes)} full blocks of tokens"
        for i, b in enumerate(r.block_ids):
            want = hashes[i] if i < r.num_cached_blocks else None
            if hash_of.get(b) != want:
                what = "is not cached" if hash_of.get(b) is None else "is cached under another prefix's hash"
                if want is None:
                    what = "is cached, though not among its cached blocks"
                return f"block {b} at position {i} of {rid}'s table {what}"
    return ""


def view_from_states(
    pre: SchedulerState,
    out: SchedulerOutput,
    post: SchedulerState,
    model_output: ModelRunnerOutput | None = None,
    finished: Mapping[str, FinishedRequest] | None = None,
) -> StepView:
    """`post` is the state after update_from_output with `model_output`, in which `finished` ended."""
    requests = {rid: r.request for rid, r in {**pre.requests, **post.requests}.items()}
    held = {rid: r.block_ids for rid, r in post.requests.items()}
    caching = post.config.enable_prefix_caching
    blocks = Blocks(
        ids_problem(held, post.free_block_queue, post.config.num_gpu_blocks, shared_ok=caching),
        shared_refs(held),
        refs_problem(post),
        cache_problem(post) if caching else "",
    )
    return make_view(
        pre.config,
        requests,
        {rid: counts_of(r) for rid, r in pre.requests.items()},
        {rid: counts_of(r) for rid, r in post.requests.items()},
        (pre.running, pre.waiting),
        (post.running, post.waiting),
        out,
        pre.num_free_blocks,
        post.num_free_blocks,
        blocks,
        model_output,
        finished,
        post_num_skipped_waiting=post.num_skipped_waiting,
    )
