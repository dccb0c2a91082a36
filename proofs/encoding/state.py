"""The encoding's data: a symbolic (or concrete) pre-state of N request slots, the config, and the step's result.

Every field is an int or a bool, or a Z3 term standing for one. The
three features (prefix caching, spec decode, async scheduling) add fields whose defaults are their values with the
feature off, so the core encoding never sees them (`step.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...spec.versions import DEFAULT_RELEASE

Int = Any
Bool = Any


@dataclass
class Slot:
    num_prompt_tokens: Int
    num_output_tokens: Int
    num_computed_tokens: Int
    num_blocks: Int
    max_tokens: Int
    min_tokens: Int
    priority: Int
    arrival: Int
    id_rank: Int  # rank of the request id: the heap's last tie-break
    preempted: Bool  # status PREEMPTED (waiting after an earlier preemption)
    samples_eos: Bool  # this step's sampled token, if any, is the EOS
    samples_stop: Bool  # ... or one of the stop tokens
    # Sync spec decode (`Config.spec_decode`; the defaults are the core scope), see spec_decode.py.
    num_spec_tokens: Int = 0  # S: drafts held
    is_prefill_chunk: Bool = False  # as the last schedule() left it: the padding gate reads it
    num_accepted: Int = 0  # the verifier accepts this many of the scheduled drafts
    stop_at: Int = 1  # position of the EOS / stop token among the appended tokens
    num_new_drafts: Int = 0  # the drafter's next proposal
    # Prefix caching (`Config.prefix_caching`), see prefix_caching.py.
    hit_blocks: Int = 0  # blocks of its hash chain found cached when it is looked up in the waiting pass
    evictable: Int = 0  # ... of which this many sit, unreferenced, in the free queue
    shared_freed: Int = 0  # when it frees its blocks, this many are still held by another request
    # Async scheduling (`Config.async_scheduling`), see async_scheduling.py: P, and the one step in flight.
    num_output_placeholders: Int = 0  # P
    in_flight: Bool = False  # the step in flight scheduled this request
    in_flight_num_scheduled: Int = 0  # ... this many tokens
    in_flight_num_drafts: Int = 0  # ... of which drafts (or padding)
    in_flight_placeholders: Int = 0  # ... and added this many placeholders: 0 for a prefill chunk, else 1 + drafts

    @property
    def num_tokens(self) -> Int:
        return self.num_prompt_tokens + self.num_output_tokens


@dataclass
class Config:
    token_budget: Int
    max_num_seqs: Int
    max_model_len: Int
    block_size: int  # concrete: ceil-division by a symbolic size would make the formula nonlinear
    num_usable_blocks: Int
    long_prefill_token_threshold: Int
    watermark_blocks: Int
    enable_chunked_prefill: Bool
    scheduler_reserve_full_isl: Bool
    adaptive: Bool
    fcfs: bool
    spec_decode: bool = False  # concrete: the core formula is built without a trace of the feature
    num_speculative_tokens: Int = 0
    prefix_caching: bool = False
    async_scheduling: bool = False  # concrete, like the other two
    release: str = DEFAULT_RELEASE  # concrete: the vLLM release whose rules the formula states (spec/versions.py)


@dataclass
class Pre:
    config: Config
    slots: list[Slot]
    num_running: Int  # slots [0, num_running) run, in order; the rest wait, in order
    num_free_blocks: Int
    num_shared_refs: Int = 0  # prefix caching: block-table entries beyond each block's first holder

    def running(self, i: int) -> Bool:
        return i < self.num_running


@dataclass
class Post:
    """Per slot: the step's output and the state after update_from_output."""

    scheduled: list[Bool] = field(default_factory=list)
    num_scheduled: list[Int] = field(default_factory=list)
    admitted: list[Bool] = field(default_factory=list)
    preempted: list[Bool] = field(default_factory=list)
    running: list[Bool] = field(default_factory=list)
    waiting: list[Bool] = field(default_factory=list)
    finished: list[Bool] = field(default_factory=list)
    sampled_stop: list[Bool] = field(default_factory=list)
    finished_stopped: list[Bool] = field(default_factory=list)
    run_pos: list[Int] = field(default_factory=list)
    wait_pos: list[Int] = field(default_factory=list)
    num_computed_tokens: list[Int] = field(default_factory=list)
    num_tokens: list[Int] = field(default_factory=list)
    num_blocks: list[Int] = field(default_factory=list)
    num_free_blocks: Int = 0
    assume: list[Bool] = field(default_factory=list)  # facts that select the case of a split step (see `step`)
    num_scheduled_spec: list[Int] = field(default_factory=list)  # spec decode: drafts (or padding) scheduled
    num_spec_tokens: list[Int] = field(default_factory=list)  # spec decode: S after the drafter
    inputs: list[Bool] = field(default_factory=list)  # bounds on the step's free inputs (model, drafter, cache)
    num_hit_tokens: list[Int] = field(default_factory=list)  # prefix caching: C at admission
    num_shared_refs: Int = 0
    # Async: P after the step, and the step now in flight (the one just scheduled), per slot.
    num_output_placeholders: list[Int] = field(default_factory=list)
    in_flight: list[Bool] = field(default_factory=list)
    in_flight_num_scheduled: list[Int] = field(default_factory=list)
    in_flight_num_drafts: list[Int] = field(default_factory=list)
    in_flight_placeholders: list[Int] = field(default_factory=list)


# The fields of `StepState` that a cut of the running pass (`runs/cuts.py`) replaces with fresh symbols, in this order.
STATE = ("in_run", "sched", "n", "preempted", "pop_seq", "C", "blocks", "free", "budget", "pops", "active")


@dataclass
class StepState:
    """What the passes of one step thread through (`step.py`): per slot, and for the pool.

    Each field is an int or a bool, or a Z3 term standing for one, as in `Pre`. The running pass
    (`running.py`) moves the fields named in `STATE`, which a cut may replace, and the feature fields; the
    waiting pass (`waiting.py`) admits into them and sets its own; the update (`update.py`) reads them all
    into a `Post`.
    """

    in_run: list[Bool]  # in `running`
    sched: list[Bool]  # scheduled in this step
    n: list[Int]  # ... with this many tokens
    preempted: list[Bool]  # popped by the running pass
    pop_seq: list[Int]  # order of preemption: FCFS prepends, so the last victim ends up first
    C: list[Int]  # num_computed_tokens
    blocks: list[Int]
    free: Int  # blocks in the free queue
    budget: Int  # token budget left
    pops: Int  # victims so far
    active: Bool  # the running pass goes on: budget left, and under FCFS nobody preempted itself
    S: list[Int]  # spec decode: drafts held
    drafts: list[Int]  # spec decode: drafts (or padding) scheduled
    P: list[Int]  # async: placeholders; 0 otherwise
    stale: list[Bool]  # async: preempted in this step with the older step in flight
    shared: Int  # prefix caching: block-table entries beyond each block's first holder
    prefill_scheduled: Bool  # spec decode: a running slot was scheduled mid-prefill (the padding gate reads it)
    inputs: list[Bool] = field(default_factory=list)  # bounds on the step's free inputs (cache lookups, frees)
    assume: list[Bool] = field(default_factory=list)  # facts that select the case of a split step (`Post.assume`)
    # Set by the waiting pass.
    in_wait: list[Bool] = field(default_factory=list)  # in `waiting`
    admitted: list[Bool] = field(default_factory=list)
    adm_pos: list[Int] = field(default_factory=list)  # how many ran when it was admitted
    wpos: list[Int] = field(default_factory=list)  # place in `waiting` after the running pass

    @classmethod
    def before(cls, pre: Pre) -> StepState:
        """The state at the start of `schedule()`: nothing scheduled, the budget whole."""
        slots, N = pre.slots, len(pre.slots)
        return cls(
            in_run=[pre.running(i) for i in range(N)],
            sched=[False] * N,
            n=[0] * N,
            preempted=[False] * N,
            pop_seq=[0] * N,
            C=[s.num_computed_tokens for s in slots],
            blocks=[s.num_blocks for s in slots],
            free=pre.num_free_blocks,
            budget=pre.config.token_budget,
            pops=0,
            active=True,
            S=[s.num_spec_tokens for s in slots],
            drafts=[0] * N,
            P=[s.num_output_placeholders for s in slots],
            stale=[False] * N,
            shared=pre.num_shared_refs,
            prefill_scheduled=False,
        )
