"""What an invariant sees: one step as rows of numbers and flags.

An invariant is a predicate over (state before, step output, state after).
To be checkable three ways (a monitor on any engine's trace, a CrossHair
postcondition on the reference, a Z3 formula in `proofs/`), it cannot read
rich Python objects; it reads a `StepView`: one `Row` per request that was
live before or after the step, and a few global numbers. Every field is an
int or a bool, so a backend may fill it with Z3 terms instead.

Queues are positions (`-1`: not in that queue), blocks are counts. Block
*ids* are checked concretely only (`ids_consistent`): Z3 abstracts them to
counts, as `proofs/` documents. So are ref counts and block hashes
(`refs_consistent`, `cache_consistent`): a backend that cannot see them
leaves them True.

The fields that prefix caching, spec decode and async scheduling added all
default to what they are with the three features off (no drafts, no
placeholders, no hit, nothing shared), so a backend that does not model a
feature builds the same views as before, and every invariant over such a
field holds trivially there.

Field prefixes: `pre_` is the state `schedule()` starts from (arrivals and
aborts applied), `post_` the state after the step, and the unprefixed step
fields are the output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..versions import DEFAULT_RELEASE

Int = Any  # an int, or a Z3 ArithRef
Bool = Any  # a bool, or a Z3 BoolRef


@dataclass(frozen=True)
class Row:
    request_id: str
    # Fixed at submission.
    num_prompt_tokens: Int
    max_tokens: Int
    priority: Int
    arrival: Int  # dense rank of arrival_time among the rows: the victim key's tie-break
    # Before the step.
    pre_live: Bool
    pre_running: Bool
    pre_waiting: Bool
    pre_preempted: Bool  # status PREEMPTED: waiting after a preemption
    pre_run_pos: Int
    pre_wait_pos: Int
    pre_num_computed_tokens: Int
    pre_num_tokens: Int
    pre_num_blocks: Int
    # The step's output.
    scheduled: Bool  # has an entry in num_scheduled_tokens
    num_scheduled: Int  # the entry; 0 when not scheduled
    admitted: Bool  # new or resumed this step
    preempted: Bool  # preempted in this step
    # After the step.
    post_live: Bool
    post_running: Bool
    post_waiting: Bool
    post_run_pos: Int
    post_wait_pos: Int
    post_num_computed_tokens: Int
    post_num_tokens: Int
    post_num_blocks: Int
    post_num_spec_tokens: Int = 0  # S: len(spec_token_ids)
    post_num_output_placeholders: Int = 0  # P
    # Before the step, for the three features (0 with them off).
    pre_num_spec_tokens: Int = 0
    pre_num_output_placeholders: Int = 0
    pre_num_stale_output_tokens: Int = 0  # a waiting request with stale output still in flight is skipped
    # Structured output: waiting for a grammar that has not compiled as schedule() starts, so the pass skips it;
    # and of those, one whose compile failed (the pass notes it, and the update finishes it with FINISHED_ERROR).
    pre_grammar_wait: Bool = False  # status WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR before the step
    pre_blocked: Bool = False
    pre_grammar_failed: Bool = False
    # LoRA: its adapter held no slot while max_loras adapters did, counted after the step (the pass passes it over;
    # the set the pass saw was already full, and admissions never add to a full set).
    lora_waits: Bool = False
    # Pipeline parallel under async: the decode cadence holds it as schedule() starts (rules.decode_cadence_waits).
    pre_cadence_wait: Bool = False
    pre_prefill_chunk: Bool = False  # is_prefill_chunk as schedule() starts: its last step left prompt to compute
    # After the step, 0.28.0-0.30.0 under FCFS: in vLLM's `skipped_waiting`, which a preempted request goes behind.
    post_in_skipped_queue: Bool = False
    # The step's output, for the three features.
    num_scheduled_spec: Int = 0  # len(scheduled_spec_decode_tokens[r]): drafts (or padding) scheduled
    num_hit_tokens: Int = 0  # an admitted request's num_computed_tokens at admission: its prefix-cache hit
    # After the step: the async counters (always 0 in the synchronous engine, between steps).
    post_num_in_flight_tokens: Int = 0
    post_num_stale_output_tokens: Int = 0
    # How this step's sampling ended for the request.
    sampled_stop: Bool = False  # it appended its EOS or one of its stop tokens
    finished_stopped: Bool = False  # it finished as FINISHED_STOPPED in this step
    aborted_mid_step: Bool = False  # aborted after the model ran, before the update, which passes it over
    min_tokens: Int = 0  # fixed at submission; before 0.29.0 it held back every stop (spec/versions.py)
    skip_reading_prefix_cache: Bool = False  # fixed at submission: it takes no prefix hit


@dataclass(frozen=True)
class StepView:
    rows: tuple[Row, ...]
    token_budget: Int
    max_num_seqs: Int
    max_model_len: Int
    block_size: Int
    num_usable_blocks: Int
    long_prefill_token_threshold: Int  # as configured
    threshold_adaptive: bool
    fcfs: bool
    pre_num_free_blocks: Int
    post_num_free_blocks: Int
    # Concrete-only facts about block ids; True when a backend cannot see ids.
    ids_consistent: Bool = True
    ids_problem: str = ""
    # The three features (prefix caching, spec decode, async scheduling), as configured.
    enable_prefix_caching: bool = False
    num_speculative_tokens: Int = 0
    async_scheduling: bool = False
    pipeline_parallel_size: Int = 1  # > 1: a batch queue even without async scheduling
    # The tokens a decode appends (SchedulerConfig.num_sampled_tokens_per_step): 0 for a pooling model from 0.32.0,
    # whose requests may compute up to L and owe nothing once their whole prompt is in flight.
    num_sampled_tokens_per_step: Int = 1
    # The prefill cadence held every prefill back in this step (rebuilt by the trace replay, `prefill_cadence.py`;
    # False in a view from states or Z3 terms, which never draw an interval).
    prefills_deferred: Bool = False
    # The pause lets the waiting pass take from the waiting queue (UNPAUSED; spec/controls.py). Rebuilt by the trace
    # replay; True in a view from states or Z3 terms, which never pause.
    admits_waiting: Bool = True
    vllm_version: str = DEFAULT_RELEASE  # concrete: the release whose rules the invariants state
    # Block-table entries beyond a block's first holder: > 0 only where prefix caching shares blocks.
    post_num_shared_block_refs: Int = 0
    # Concrete-only: every held block's ref count is its number of holders and the free queue is exactly
    # the unreferenced blocks; every cached block is cached under the hash of its holders' tokens.
    refs_consistent: Bool = True
    refs_problem: str = ""
    cache_consistent: Bool = True
    cache_problem: str = ""
    # Concrete-only: the first wrong decision of each decision invariant (`decisions.py`), as the trace replay
    # walked the step; None where nothing walked it (views from states, or Z3 terms): they hold there.
    decision_problems: tuple[tuple[str, str], ...] | None = None
    # The admission test's knobs, as configured (the decision invariants' row forms read them: decision_rows.py).
    watermark_blocks: Int = 0
    enable_chunked_prefill: Bool = True
    scheduler_reserve_full_isl: Bool = True
