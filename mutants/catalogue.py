"""The mutants of the core scope: the bug-zoo entries it makes live, and classic mutations.

Each names the bug-zoo entry it plants (or "classic") and the invariants
expected to trip. A mutant that cannot change behaviour in the modelled
scope is kept, with the argument, in `EQUIVALENT`, rather than silenced.
Snippets are canonical source (`planting.py` says why and how to write one).
"""

from __future__ import annotations

from .planting import Mutant

CORE_MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "Z1-no-refund",
        "Z1",
        "leave an already-scheduled PRIORITY victim in the step's output",
        "reference_impl.scheduler:Scheduler.schedule",
        "if preempted_req in scheduled_running_reqs:",
        "if False:",
        ("scheduled-subset-running", "budget-conservation"),
    ),
    Mutant(
        "Z4-min-tokens-first",
        "Z4",
        "min_tokens returns 'not stopped' before the length caps are checked",
        "spec.rules:stop_kind",
        "ite(or_(num_tokens >= max_model_len, num_output_tokens >= max_tokens), LENGTH_CAPPED, NOT_STOPPED)",
        "ite(num_output_tokens < min_tokens, NOT_STOPPED,"
        " ite(or_(num_tokens >= max_model_len, num_output_tokens >= max_tokens), LENGTH_CAPPED, NOT_STOPPED))",
        ("token-bounds",),
    ),
    Mutant(
        "Z10-admit-after-preemption",
        "Z10",
        "run the waiting pass even in a step that preempted",
        "spec.rules:waiting_pass_allowed",
        "return num_preempted == 0",
        "return True",
        ("no-admission-after-preemption",),
    ),
    Mutant(
        "Z12-leak-on-preempt",
        "Z12",
        "preemption returns all but one of the victim's blocks",
        "reference_impl.scheduler:Scheduler._preempt_request",
        "self.kv_cache_manager.free(request)",
        "self.kv_cache_manager.block_pool.free_blocks(reversed(request.block_ids[1:]))\nrequest.block_ids = []",
        ("block-conservation",),
    ),
    Mutant(
        "Z13-length-before-stop",
        "Z13",
        "check the length caps before EOS and stop tokens",
        "spec.rules:stop_kind",
        "verdict = ite(or_(is_eos, is_stop_token), STOPPED,"
        " ite(or_(num_tokens >= max_model_len, num_output_tokens >= max_tokens), LENGTH_CAPPED, NOT_STOPPED))",
        "verdict = ite(or_(num_tokens >= max_model_len, num_output_tokens >= max_tokens), LENGTH_CAPPED,"
        " ite(or_(is_eos, is_stop_token), STOPPED, NOT_STOPPED))",
        ("stop-token-finishes",),
    ),
    Mutant(
        "Z14-double-free",
        "Z14",
        "free a request's tail block twice",
        "reference_impl.kv_cache_manager:KVCacheManager.free",
        "self.block_pool.free_blocks(reversed(request.block_ids))",
        "self.block_pool.free_blocks(list(reversed(request.block_ids)) + request.block_ids[-1:])",
        ("block-conservation",),
    ),
    Mutant(
        "stop-at-L-off-by-one",
        "classic",
        "check_stop lets a request reach max_model_len tokens without finishing",
        "spec.rules:stop_kind",
        "num_tokens >= max_model_len",
        "num_tokens > max_model_len",
        ("token-bounds",),
    ),
    Mutant(
        "threshold-off-by-one",
        "classic",
        "the long-prefill threshold lets one token too many through",
        "spec.rules:clamp_to_threshold",
        "threshold, num_new_tokens)",
        "threshold + 1, num_new_tokens)",
        ("chunk-bounds", "grant-exact"),
    ),
    Mutant(
        "budget-off-by-one",
        "classic",
        "the running pass may overdraw the token budget by one",
        "spec.rules:running_num_new_tokens",
        "n = min_(n, token_budget)",
        "n = min_(n, token_budget + 1)",
        ("budget-conservation",),
    ),
    Mutant(
        "blocks-off-by-one",
        "classic",
        "allocation asks for one block too many",
        "spec.rules:num_blocks_to_allocate",
        "- num_held_blocks, 0)",
        "- num_held_blocks + 1, 0)",
        ("blocks-match-tokens", "block-conservation"),
    ),
    Mutant(
        "wrong-victim",
        "classic",
        "FCFS preempts the oldest running request instead of the newest",
        "spec.rules:fcfs_victim_index",
        "return num_running - 1",
        "return 0",
        ("fcfs-victim-is-latest",),
    ),
    Mutant(
        "append-not-prepend",
        "classic",
        "a preempted request joins the back of the waiting queue",
        "reference_impl.scheduler:Scheduler._preempt_request",
        "self.waiting.prepend_request(request)",
        "self.waiting.add_request(request)",
        ("no-starvation-after-prepend",),
    ),
    Mutant(
        "missing-free",
        "classic",
        "preemption keeps the victim's blocks",
        "reference_impl.scheduler:Scheduler._preempt_request",
        "self.kv_cache_manager.free(request)",
        "pass",
        ("waiting-holds-nothing", "block-conservation"),
    ),
    Mutant(
        "priority-self-preempt-breaks",
        "classic",
        "`continue` swapped for `break` after a PRIORITY self-preemption",
        "reference_impl.scheduler:Scheduler.schedule",
        "if request.status == RequestStatus.PREEMPTED and rules.self_preemption_continues(config.policy, config.vllm_version):\n    continue",
        "if request.status == RequestStatus.PREEMPTED and rules.self_preemption_continues(config.policy, config.vllm_version):\n    break",
        ("running-work-conserving",),
    ),
    # Decisions changed within every bound: the catalogue's bound invariants pass them all, the decision
    # invariants (spec/invariants/decisions.py) do not (tests/quality/test_decision_invariants_catch_mutants.py).
    Mutant(
        "running-threshold-when-alone",
        "classic",
        "the running pass clamps by the configured long-prefill threshold, not the step's effective one",
        "reference_impl.scheduler:Scheduler.grant",
        "rules.running_num_new_tokens(request.num_owed_tokens, long_prefill_token_threshold,",
        "rules.running_num_new_tokens(request.num_owed_tokens, self.config.long_prefill_token_threshold,",
        ("grant-exact",),
        ("threshold",),
    ),
    Mutant(
        "priority-victim-tie-last",
        "classic",
        "PRIORITY breaks a tie between equal (priority, arrival) keys toward the last running request, not the first",
        "reference_impl.scheduler:Scheduler.victim_index",
        "preempted_req = max(self.running, key=lambda r: victim_key(r.priority, r.arrival_time))",
        "preempted_req = max(reversed(self.running), key=lambda r: victim_key(r.priority, r.arrival_time))",
        ("victims-exact",),
        ("priority",),
    ),
    Mutant(
        "victim-index-not-adjusted",
        "classic",
        "a PRIORITY victim ahead of the current request leaves req_index where it was, so the pass skips a request",
        "reference_impl.scheduler:Scheduler.schedule",
        "if victim_index < req_index:\n    req_index -= 1",
        "pass",
        ("running-work-conserving",),
        ("priority",),
    ),
    Mutant(
        "watermark-ignored",
        "classic",
        "admission ignores the watermark: it is applied as if nothing were running",
        "reference_impl.scheduler:Scheduler.schedule",
        "has_scheduled_reqs=bool(self.running))",
        "has_scheduled_reqs=False)",
        ("admission-exact",),
        ("kv-pressure",),
    ),
    Mutant(
        "no-chunking-chunks",
        "classic",
        "with chunked prefill off, a waiting request that does not fit the budget is admitted in a chunk",
        "reference_impl.scheduler:Scheduler.schedule",
        "if not config.enable_chunked_prefill and num_new_tokens > request_token_budget:\n    break",
        "if False:\n    break",
        ("admission-exact",),
        ("no-chunking",),
    ),
    Mutant(
        "free-not-reversed",
        "classic",
        "a request's blocks are freed head first, so its head block, not its tail, is reused first",
        "reference_impl.kv_cache_manager:KVCacheManager.free",
        "self.block_pool.free_blocks(reversed(request.block_ids))",
        "self.block_pool.free_blocks(request.block_ids)",
        ("block-choice-exact",),
        ("kv-pressure",),
    ),
    Mutant(
        "length-cap-one-early",
        "classic",
        "check_stop counts one output too many against max_tokens, so the length cap finishes a request one early",
        "reference_impl.stop:check_stop",
        "request.num_output_tokens, max_model_len",
        "request.num_output_tokens + 1, max_model_len",
        ("stop-exact",),
        ("stops",),
    ),
)

EQUIVALENT: dict[str, str] = {
    "clamp-L-off-by-one": "The running-pass clamp n <= L - C - 1 never binds without drafts: a prefill chunk stops at "
    "T <= L - 1 and a decode has C = T - 1 < L - 1, so L - C instead of L - C - 1 is unobservable "
    "in the core scope (D4 shows it binding once drafts exist).",
    "Z3": "0.33.0 already caps every running chunk at L - C - 1 and rejects a prompt of L tokens upstream "
    "(workload validation does the same), so 'keep the -1 for prefill chunks' is the pinned code itself.",
    "Z5": "The skip that Z5 re-queues in reverse needs a schedule() while a preempted request's output is still in "
    "flight. vLLM's step_with_batch_queue never does that with a queue of 2 (async, PP = 1): the schedule that "
    "preempts fills the queue, so the same step absorbs the victim's output. So on its own (core) families "
    "Z5-skipped-reversed survives every checker that drives the engine loop (monitors, diff); it is live only "
    "where a deeper pipeline (PP > 1, or vLLM's own T16, which schedules twice before updating) leaves two steps "
    "in flight: the engine loop's under pipeline parallel (the pipeline-parallel family, where the monitors and "
    "the differ kill it at the first workload) and the state machine's async runs.",
    "Z8": "vLLM 0.33.0's guard `if scheduled_spec_token_ids and generated_token_ids` is Z8's behaviour: an empty "
    "row for a request with drafts skips the refund. It is unobservable here: drafts are scheduled only on top "
    "of everything else a request is owed (never for a prefill chunk), so the model always samples for such a "
    "request, and a stale row leaves C and P alone either way. The fake model, like vLLM's runner without "
    "failed KV loads, never returns an empty row for it, so neither the guard nor its removal can be told apart.",
    "Z9": "'prepend is a heap push' is vLLM 0.33.0's own PRIORITY queue: the pinned semantics, documented as a "
    "deliberate difference from FCFS, not a mutant.",
}
