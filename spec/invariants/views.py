"""What an invariant sees: one step as rows of numbers and flags.

An invariant is a predicate over (state before, step output, state after).
To be checkable three ways (a monitor on any engine's trace, a CrossHair
postcondition on the reference, a Z3 formula in `proofs/`), it cannot read
rich Python objects; it reads a `StepView`: one `Row` per request that was
live before or after the step, and a few global numbers. Every field is an
int or a bool, so a backend may fill it with Z3 terms instead.

Queues are positions (`-1`: not in that queue), blocks are counts. Block
*ids* are checked concretely only (`ids_consistent`): Z3 abstracts them to
counts, as `proofs/` documents.

Field prefixes: `pre_` is the state `schedule()` starts from (arrivals and
aborts applied), `post_` the state after the step, and the unprefixed step
fields are the output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    post_num_spec_tokens: Int = 0
    post_num_output_placeholders: Int = 0
    # How this step's sampling ended for the request.
    sampled_stop: Bool = False  # it appended its EOS or one of its stop tokens
    finished_stopped: Bool = False  # it finished as FINISHED_STOPPED in this step


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
