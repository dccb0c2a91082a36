"""The scheduler's rules, each written once: the reference, the monitors, the Z3 encoding and the torch engine use them.

These are the lines of vLLM (0.33.0, and the releases before it where a
rule differs: `release`, a config's `vllm_version`, picks the side, see
`spec/versions.py`) that turn "what a request is owed" into
"what it gets", "how many blocks that takes", "who is preempted" and "when
does it stop". Every one lives here because the import rules leave no other
home that all its users reach: the monitors (`spec/invariants`, whose
decision invariants re-derive every decision of a step from a trace) may
import nothing outside `spec/`, and the torch engine may import `spec/` but
never the reference. The reference calls them through `reference_impl/rules.py`
(`rules.running_num_new_tokens(...)`, read beside vLLM's lines), and so does
`proofs/`, so a mutant planted in a rule reaches the reference and the
encoding at once (and the monitors, if they run while it is planted: a
monitor that reads a rule then watches the rule's use, not its content;
`docs/architecture.md`).

* `victim_key`: which running request PRIORITY preempts. The reference
  maximises it, Z3 compares it (`proofs/encoding/order.py`), the monitors
  check that the victims maximise it.
* `heap_key`: the PRIORITY waiting queue's order. The reference's queue
  sorts by it, the trace replay orders arrivals by it, Z3 orders the waiting
  slots by it, and the torch engine ranks requests by it when it loads them.
* `preempted_counters`: what `_preempt_request` leaves in a victim's
  counters. The reference stores them field by field, in vLLM's order, and Z3
  applies them to the victim's slot.
* `num_owed_tokens`: the seed formula. `spec.state.RequestProperties` (the
  derived properties of the frozen state and of the reference's mutable
  request) computes it, and so do Z3 and the monitors.
* The step's arithmetic and decisions, below them: the threshold and its
  clamp, the running and waiting grants, slots and blocks, the allocation
  test, the waiting-pass gate, the FCFS victim, the stop verdict, and the
  three features' rules (prefix-hit limit, spec padding, drafts scheduled and
  rejected, the async max-tokens skip).

Each is a plain function of ints and Z3 terms (`spec.arith`: `ite`, `min_`
and `and_` in place of `if`, `min` and `and`), so the Z3 encoding builds its
formula from the same lines. The torch engine cannot run them on tensors, so
it keeps tensor twins (`gpu_impl/preemption.py`, `gpu_impl/rules.py`), and
`tests/unit/gpu_impl/test_rule_twins.py` checks each twin against its rule on random
inputs. `docs/architecture.md` lists who uses each rule.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .arith import and_, cdiv, fdiv, ite, max_, min_, not_, or_, plus
from .request import RequestStatus
from .versions import DEFAULT_RELEASE, holds

Int = Any  # an int or a Z3 ArithRef
Bool = Any  # a bool or a Z3 BoolRef


def victim_key(priority: Int, arrival_time: Any) -> tuple[Int, Any]:
    """vllm/v1/core/sched/scheduler.py:Scheduler.schedule (932-936): PRIORITY preempts
    `max(running, key=(priority, arrival_time))`.

    The largest key is the least important request: the highest priority
    value, and among those the latest arrival. The request id is not part of
    the key, unlike the heap's, so on an exact tie Python's `max` takes the
    first in running order. Compare keys with `spec.arith.lex_gt` / `lex_ge`,
    which work on Z3 terms too.
    """
    return (priority, arrival_time)


def heap_key(priority: Int, arrival_time: Any, request_id: Any) -> tuple[Int, Any, Any]:
    """vllm/v1/request.py:Request.__lt__ (357-367): the PRIORITY waiting heap pops the smallest key first.

    The last tie-break, `id()`, never decides between distinct request ids.
    The Z3 encoding passes the rank of the id for `request_id` (the rank keeps
    its order).
    """
    return (priority, arrival_time, request_id)


class PreemptedCounters(NamedTuple):
    """A victim's counters after `_preempt_request`, named as `spec.state.RequestState` names them."""

    status: RequestStatus
    num_computed_tokens: Int
    num_blocks: Int
    num_spec_tokens: Int
    num_output_placeholders: Int
    num_stale_output_tokens: Int
    drop_stale_output: Bool
    num_preemptions: Int


def preempted_counters(
    num_in_flight_tokens: Int,
    num_stale_output_tokens: Int,
    drop_stale_output: Bool,
    num_preemptions: Int,
    drop: Bool = False,
) -> PreemptedCounters:
    """Preemption by recompute: vllm/v1/core/sched/scheduler.py:Scheduler._preempt_request (1812-1842).

    The victim keeps its tokens and loses everything computed from them: C,
    every block, the drafts and the output placeholders go to 0, so it is
    recomputed from scratch when it is admitted again. Output still in flight
    becomes stale. It is still delivered, but it may no longer move the reset
    counters, unless the caller drops it (`drop`: `reset_prefix_cache`, whose
    same-step resume would deliver tokens out of order). A drop-mode share that
    has not drained stays dropped. Where the
    victim goes (the head of the FCFS deque, or into the PRIORITY heap) is the
    queue's `prepend_request`, not a counter. The caller frees the blocks and
    requeues the request.

    Only the arguments a counter's new value depends on are passed. The
    encoding tracks "is anything in flight" as a Bool and passes that for
    `num_in_flight_tokens`: stale takes it over unchanged, so the abstraction
    commutes with the rule.
    """
    return PreemptedCounters(
        status=RequestStatus.PREEMPTED,
        num_computed_tokens=0,
        num_blocks=0,
        num_spec_tokens=0,
        num_output_placeholders=0,
        num_stale_output_tokens=num_in_flight_tokens,
        drop_stale_output=or_(drop, and_(drop_stale_output, num_stale_output_tokens > 0)),
        num_preemptions=num_preemptions + 1,
    )


def num_owed_tokens(num_tokens_with_spec: Int, num_output_placeholders: Int, num_computed_tokens: Int) -> Int:
    """What a request is owed before any clamp: vllm/v1/core/sched/scheduler.py:Scheduler.schedule (839-843).

    `num_tokens_with_spec + num_output_placeholders - num_computed_tokens`.
    Under async scheduling the placeholders count tokens a step in flight will
    return, so a decode that has caught up is still owed one. A literal 0 for
    the placeholders adds no term, so the core Z3 formula has no trace of
    async scheduling.
    """
    return plus(num_tokens_with_spec, num_output_placeholders) - num_computed_tokens


# ---- The step's arithmetic: what a request gets, and the blocks it takes. ----


def effective_threshold(
    threshold: Int, num_eligible_reqs: Int, adaptive: bool, input_budget: Int, release: str = DEFAULT_RELEASE
) -> Int:
    """vllm/v1/core/sched/scheduler.py:Scheduler.schedule (754-769): a lone request (running + waiting <= 1) is never
    capped. Before 0.31.0 the threshold caps every chunk, and `adaptive` does not exist (the config refuses it)."""
    if not holds("lone-request-threshold-off", release):
        return threshold
    thr = ite(num_eligible_reqs > 1, threshold, 0)
    if adaptive:  # T10: floored by the fair share of the batch
        thr = ite(thr > 0, max_(thr, fdiv(input_budget, max_(num_eligible_reqs, 1))), thr)
    return thr


def clamp_to_threshold(num_new_tokens: Int, threshold: Int) -> Int:
    """`if 0 < long_prefill_token_threshold < num_new_tokens`
    (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (844-845, 1332-1333))."""
    return ite(and_(0 < threshold, threshold < num_new_tokens), threshold, num_new_tokens)


def running_num_new_tokens(
    num_owed: Int,
    threshold: Int,
    token_budget: Int,
    max_model_len: Int,
    num_computed_tokens: Int,
    num_sampled_tokens_per_step: Int = 1,
) -> Int:
    """RUNNING pass, vllm/v1/core/sched/scheduler.py:Scheduler.schedule (839-857): owed, then the threshold, the
    budget, the position bound, floored at 0 (vllm/v1/core/sched/scheduler.py:Scheduler._reserve_prefill_lookahead
    returns `max(num_new_tokens, 0)`). The floor matters only for a request past L - 1, which before 0.29.0 a
    min_tokens request reaches (it recomputes T = L tokens after a preemption), and which 0.29.0+ never keep."""
    n = clamp_to_threshold(num_owed, threshold)
    n = min_(n, token_budget)
    return max_(min_(n, max_model_len - num_computed_tokens - num_sampled_tokens_per_step), 0)


def waiting_num_new_tokens(
    num_tokens: Int, num_computed_tokens: Int, threshold: Int, padded_num_tokens: Int = 0
) -> Int:
    """WAITING pass, before the chunked-prefill check: T, not the prompt, minus the hit.

    vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1306-1333).

    `padded_num_tokens` (1 + k, or 0 for none) replaces the count of a padded
    spec-decode admission; the threshold still clips it afterwards.
    """
    n = ite(padded_num_tokens > 0, padded_num_tokens, num_tokens - num_computed_tokens)
    return clamp_to_threshold(n, threshold)


def num_tokens_need_slot(
    num_computed_tokens: Int, num_new_tokens: Int, num_lookahead_tokens: Int, max_model_len: Int
) -> Int:
    """vllm/v1/core/kv_cache_manager.py:KVCacheManager.allocate_slots (550-553): slots for what is computed plus what
    is scheduled, capped at L.

    No slot is reserved for the token about to be sampled (§9.A.2).
    """
    return min_(min_(num_computed_tokens, max_model_len) + num_new_tokens + num_lookahead_tokens, max_model_len)


def num_blocks_to_allocate(num_tokens_need_slot: Int, num_held_blocks: Int, block_size: Int) -> Int:
    """vllm/v1/core/single_type_kv_cache_manager.py:SingleTypeKVCacheManager.get_num_blocks_to_allocate (230-236):
    never negative; blocks are not shrunk after rejections."""
    return max_(cdiv(num_tokens_need_slot, block_size) - num_held_blocks, 0)


def allocation_fits(num_blocks_required: Int, watermark_blocks: Int, num_free_blocks: Int) -> Int:
    """`required + watermark <= free`: vllm/v1/core/kv_cache_manager.py:KVCacheManager.allocate_slots (582-588),
    and the full-sequence gate at vllm/v1/core/kv_cache_manager.py:KVCacheManager.allocate_slots (531-548)."""
    return num_blocks_required + watermark_blocks <= num_free_blocks


# ---- Decisions. Also rules, so that a planted bug reaches the Z3 encoding too. ----


def waiting_pass_allowed(num_preempted: Int) -> Any:
    """vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1050): a step that preempted admits nobody, even with
    budget left (I-6, Z10)."""
    return num_preempted == 0


def fcfs_victim_index(num_running: Int) -> Int:
    """vllm/v1/core/sched/scheduler.py:Scheduler.schedule (938): FCFS preempts `running[-1]`, the most recent
    admission (I-8)."""
    return num_running - 1


NOT_STOPPED, STOPPED, LENGTH_CAPPED = 0, 1, 2


def stop_kind(
    is_eos: Any,
    is_stop_token: Any,
    num_tokens: Int,
    num_output_tokens: Int,
    max_model_len: Int,
    max_tokens: Int,
    min_tokens: Int,
    release: str = DEFAULT_RELEASE,
) -> Int:
    """`check_stop`'s verdict on the last appended token, in vLLM's order
    (vllm/v1/core/sched/utils.py:check_stop).

    EOS, then stop tokens, then the length caps; `min_tokens` only gates the
    repetition check that follows, which is not configured here. Before
    0.29.0 `min_tokens` came first and held back every stop, the length caps
    included (`min-tokens-gates-every-stop`).
    """
    verdict = ite(
        or_(is_eos, is_stop_token),
        STOPPED,
        ite(or_(num_tokens >= max_model_len, num_output_tokens >= max_tokens), LENGTH_CAPPED, NOT_STOPPED),
    )
    if not holds("min-tokens-gates-every-stop", release):
        return ite(num_output_tokens < min_tokens, NOT_STOPPED, verdict)
    return verdict


# ---- The three features: prefix caching, speculative decoding, async scheduling. ----


def max_prefix_hit_blocks(num_tokens: Int, block_size: Int) -> Int:
    """vllm/v1/core/kv_cache_manager.py:KVCacheManager.get_computed_blocks (301-302): a hit never covers the last
    token, which must be recomputed for logits."""
    return fdiv(num_tokens - 1, block_size)


def pads_spec_decode(
    num_speculative_tokens: Int,
    num_new_tokens: Int,
    prefill_scheduled: Any,
    any_running_scheduled: Any,
    num_computed_tokens: Int,
    max_model_len: Int,
    release: str = DEFAULT_RELEASE,
) -> Any:
    """A decode-like admission is padded to 1 + k, if 1 + k + 1 positions fit under L.

    vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1311-1330).

    "Decode-like": one token left, no prefill in the running pass, and either
    a running request already scheduled or a prefix hit (C > 0). The caller
    breaks the waiting pass where `padded_admission_breaks` says.

    Before 0.30.0 a prefix hit alone does not make an admission decode-like
    (`padding-after-prefix-hit`); before 0.29.0 no room test decides the
    padding, the caller's break does (`padding-needs-room-to-sample`).
    """
    scheduled_first = (
        or_(any_running_scheduled, num_computed_tokens > 0)
        if holds("padding-after-prefix-hit", release)
        else any_running_scheduled
    )
    room = (
        num_computed_tokens + 1 + num_speculative_tokens + 1 <= max_model_len
        if holds("padding-needs-room-to-sample", release)
        else True
    )
    return and_(num_speculative_tokens > 0, num_new_tokens == 1, not_(prefill_scheduled), scheduled_first, room)


def padded_admission_breaks(
    pad: Any,
    num_speculative_tokens: Int,
    request_token_budget: Int,
    num_computed_tokens: Int,
    max_model_len: Int,
    release: str = DEFAULT_RELEASE,
) -> Any:
    """ "Prefer to not schedule than schedule un-padded": a padded admission that does not fit ends the waiting pass.

    vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1320-1322). From 0.29.0 only the budget decides (the room
    under L already decided the padding); before, a padding past L breaks too (`padding-needs-room-to-sample`).
    """
    over = 1 + num_speculative_tokens > request_token_budget
    if not holds("padding-needs-room-to-sample", release):
        over = or_(over, num_computed_tokens + 1 + num_speculative_tokens > max_model_len)
    return and_(pad, over)


def num_scheduled_spec_tokens(
    num_new_tokens: Int, num_computed_tokens: Int, num_tokens: Int, num_output_placeholders: Int
) -> Int:
    """vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1010-1025): what the clamps left of the drafts, i.e. the
    scheduled tokens beyond T + P."""
    return num_new_tokens + num_computed_tokens - num_tokens - num_output_placeholders


def num_rejected_drafts(num_scheduled_drafts: Int, num_generated: Int, num_sampled_tokens_per_step: Int = 1) -> Int:
    """vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output (2352-2355): every sampled token past the first
    confirms one draft."""
    return num_scheduled_drafts - max_(num_generated - num_sampled_tokens_per_step, 0)


def async_max_tokens_reached(
    num_output_placeholders: Int, num_computed_tokens: Int, num_prompt_tokens: Int, max_tokens: Int
) -> Any:
    """vllm/v1/core/sched/scheduler.py:Scheduler.schedule (800-814) (async only): even if every in-flight draft is
    rejected, the step in flight reaches max_tokens."""
    return and_(
        num_output_placeholders > 0, num_computed_tokens + 2 - num_output_placeholders >= num_prompt_tokens + max_tokens
    )


# ---- Decisions that changed between releases and live in no formula above (spec/versions.py). ----


def self_preemption_continues(policy: str, release: str = DEFAULT_RELEASE) -> bool:
    """After a running request preempted itself, whether the running pass goes on to the next request.

    vllm/v1/core/sched/scheduler.py:Scheduler.schedule (982-994): PRIORITY `continue`s from 0.33.0; FCFS (whose
    victim was the tail, so nothing follows) and PRIORITY before 0.33.0 `break`
    (`priority-self-preemption-continues`).
    """
    return policy == "priority" and holds("priority-self-preemption-continues", release)


def caches_on_update(had_output_placeholders: Any, num_speculative_tokens: Int, release: str = DEFAULT_RELEASE) -> Any:
    """Whether `update_from_output` registers a running request's processed full blocks in the prefix cache.

    vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output (2407-2415): with output in flight (async) or spec
    decode. Before 0.33.0 only the async scheduler did (its `_update_request_with_output` override), so a sync
    scheduler's blocks filled by accepted drafts waited for the next allocation (`sync-spec-decode-caches-on-update`).
    """
    if not holds("sync-spec-decode-caches-on-update", release):
        return had_output_placeholders
    return or_(had_output_placeholders, num_speculative_tokens > 0)


# ---- Deployment features (issue #36): structured output. ----


def waits_for_grammar(waiting_for_grammar: Any, grammar_compiled: Any) -> Any:
    """Whether the waiting pass passes a request over for its grammar: it waits for one
    (WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR) that has not compiled, still compiling or failed
    (vllm/v1/core/sched/scheduler.py:Scheduler._handle_blocked_waiting_request). A compiled one is promoted to
    WAITING at the pass's turn and tested for admission like any other."""
    return and_(waiting_for_grammar, not_(grammar_compiled))


# ---- Deployment features (issue #36): LoRA. ----


def lora_counts_every_running(release: str = DEFAULT_RELEASE) -> bool:
    """Whether the adapters counted against max_loras are every running request's (0.33.0), or only those of the
    running requests this step scheduled (before): vllm/v1/core/sched/scheduler.py:Scheduler.schedule
    (1038-1047), `loras-counted-over-all-running`."""
    return holds("loras-counted-over-all-running", release)


def lora_limit_skips(lora_int_id: Int, adapter_running: Any, num_adapters_running: Int, max_loras: int | None) -> Any:
    """Whether the waiting pass passes over a request for LoRA's `max_loras`: it names an adapter no running request
    uses (running after this step's running pass, or admitted before it in this pass) while `max_loras` adapters
    already run (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1091-1101)). Without a LoRA config, never."""
    if max_loras is None:
        return False
    return and_(lora_int_id > 0, num_adapters_running == max_loras, not_(adapter_running))


# ---- Deployment features (issue #36): pipeline parallel. ----


def decode_cadence_waits(current_step: Int, next_decode_eligible_step: Int) -> Any:
    """Whether the running pass passes over a request for the PP decode cadence: its last decode was scheduled
    fewer than `decode_stagger` schedule() calls ago (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (816-820)).
    Only async scheduling sets `next_decode_eligible_step`; everywhere else it stays 0 and nothing waits."""
    return current_step < next_decode_eligible_step


def next_decode_eligible_step(current_step: Int, decode_stagger: Int) -> Int:
    """The schedule() call from which a request that sampled in call `current_step` may decode again, async only
    (vllm/v1/core/sched/async_scheduler.py:AsyncScheduler._update_after_schedule (51-56)): `pp_size` calls later,
    so each PP stage holds at most one of its decodes. With PP = 1 it is the next call, which never waits."""
    return current_step + decode_stagger


# ---- Deployment features (issue #36): the prefill cadence. ----


def defers_prefills(
    throttle_prefills: Any,
    prefill_capacity_bound: Any,
    any_decode_running: Any,
    local_prefill_interval: Int,
    steps_since_last_prefill: Int,
) -> Any:
    """Whether this step holds every prefill back (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (750-791)).

    The DP engine core throttles a step off its cadence (`throttle_prefills`), and from 0.33.0 an engine outside
    data parallel keeps the interval itself: fewer than `local_prefill_interval` executed steps since the last one
    that carried a prefill (`steps_since_last_prefill` counts this step as executed). Either holds only while a
    decode runs (something fills the step), and neither once the last release step could not drain the waiting
    queue (`prefill_capacity_bound`), so a backed-up engine is not throttled into a growing queue.
    """
    local = and_(local_prefill_interval > 1, steps_since_last_prefill < local_prefill_interval)
    return and_(or_(throttle_prefills, local), not_(prefill_capacity_bound), any_decode_running)


def prefill_capacity_bound(num_waiting: Int, num_deferred_waiting: Int) -> Any:
    """After a step that did not defer: the waiting pass left a request it could have served, one not passed over
    for a reason of its own (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1612-1616): more waiting than
    `deferred_waiting`; before 0.31.0 `bool(self.waiting)`, the queue beside the skipped one: the same count)."""
    return num_waiting > num_deferred_waiting


def admits_a_prefill(num_computed_tokens: Int, num_tokens: Int) -> Any:
    """Whether an admission would compute prompt (more than its last token): what a deferring step holds back in
    the waiting pass, where it ends the pass (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1290-1293)),
    and what stamps the local cadence's last prefill step (1590)."""
    return num_computed_tokens < num_tokens - 1


# ---- Deployment features (issue #36): the engine's calls outside schedule() (spec/controls.py). ----


def paused_token_budget(pause_state: Int, token_budget: Int) -> Int:
    """The step's token budget under a pause: 0 under PAUSED_ALL, so neither pass schedules anything
    (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (723-725))."""
    return ite(pause_state == 2, 0, token_budget)


def pause_runs_waiting_pass(pause_state: Int, release: str = DEFAULT_RELEASE) -> Any:
    """Whether the waiting pass runs at all under a pause: not under PAUSED_ALL, and before 0.30.0 only UNPAUSED
    (spec.versions `paused-new-runs-waiting-pass`). A pass that takes nobody still records whether the queue could
    drain (the prefill cadence's capacity bound), so the two differ under PAUSED_NEW
    (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1050))."""
    if holds("paused-new-runs-waiting-pass", release):
        return pause_state != 2
    return pause_state == 0


def pause_admits_waiting(pause_state: Int) -> Any:
    """Whether the waiting pass may take from the waiting queue: only UNPAUSED. PAUSED_NEW drains only the requests
    that hold KV blocks (`kv_holding_waiting`: connector loads and parked streaming sessions, none in the spec's
    scope), and PAUSED_ALL runs no waiting pass (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1050-1067))."""
    return pause_state == 0


# ---- Deployment features (issue #36): pooling models. ----


def sampled_tokens_per_step(pooling: bool, release: str = DEFAULT_RELEASE) -> int:
    """`num_sampled_tokens_per_step`: the tokens a scheduled decode appends, which the running pass's position bound
    keeps room for and async scheduling counts as placeholders. 0 for a pooling model from 0.32.0, which pools the
    prompt and samples nothing (spec.versions `pooling-samples-no-token`); 1 otherwise
    (vllm/v1/core/sched/scheduler.py:Scheduler.__init__ (152-161))."""
    return 0 if pooling and holds("pooling-samples-no-token", release) else 1


def pooler_output_ready(num_computed_tokens: Int, num_scheduled_tokens: Int, num_prompt_tokens: Int) -> Any:
    """Whether the model runner pools a request in this step: the step's tokens end exactly at the prompt's end
    (vllm/v1/pool/metadata.py:PoolingCursor, `finished_mask = prompt_lens == seq_lens`); a chunk short of it, or a
    token past it, pools nothing."""
    return num_computed_tokens + num_scheduled_tokens == num_prompt_tokens


def prefix_cache_lookup_enabled(enable_prefix_caching: Any, skip_reading_prefix_cache: Any) -> Any:
    """Whether an admission looks for a prefix hit: caching on, and the request not marked to skip reading the cache
    (a pooling task that needs every prompt position's output, or prompt logprobs); such a request still caches
    the blocks it fills (vllm/v1/core/kv_cache_manager.py:KVCacheManager.prefix_cache_lookup_enabled (251-253))."""
    return and_(enable_prefix_caching, not_(skip_reading_prefix_cache))
