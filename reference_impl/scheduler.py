"""`schedule()`: vLLM 0.33.0's V1 scheduling step, in vLLM's order.

Read it beside vllm/v1/core/sched/scheduler.py:Scheduler.schedule. The structure
is the same: the preamble, the RUNNING pass with its allocate-or-preempt loop, the WAITING pass
(skipped entirely in a step that preempted), the output, and
`_update_after_schedule`. What vLLM does for subsystems outside our scope
(connectors, encoders, mamba, streaming) is
left out, not stubbed, because each is inert in the configurations we model.

Every request is owed `num_tokens_with_spec + num_output_placeholders -
num_computed_tokens` tokens (`spec.rules.num_owed_tokens`), and each step
grants what the budget, the threshold, `max_model_len` and the free blocks
allow (`rules.py`). The rules this file shares with the monitors and the
torch engine (the PRIORITY victim key, what a preemption resets) live in
`spec/rules.py`, the one layer all of them may import.

Each decision of the step is also a method, a thin wrapper around its rule,
so that an engine derived from the reference changes one rule by
overriding one method instead of copying `schedule()`
(`engine.derived_engine`, `examples/my_mutants.py`):

* `grant`: how many tokens a RUNNING request gets at its turn;
* `victim_index`: which running request is preempted when an allocation fails;
* `admission_allowed`: whether the WAITING pass runs at all this step;
* `check_stop` (in `update.py`): whether a request stops after a token;
* `freed_block_to_front`: whether a released block is reused first or waits
  at the tail of the free queue.
"""

from __future__ import annotations

from collections import deque

from ..spec.config import SchedulerConfig
from ..spec.controls import PauseState
from ..spec.output import CachedRequestData, NewRequestData, SchedulerOutput
from ..spec.request import BLOCKED_STATUSES, GRAMMAR_COMPILED, GRAMMAR_COMPILING, GRAMMAR_FAILED, Request, RequestStatus
from ..spec.rules import preempted_counters, victim_key
from ..spec.state import PrefillCadence
from . import rules
from .block_pool import BlockPool
from .controls import SchedulerControls
from .kv_cache_manager import KVCacheManager
from .live_request import LiveRequest
from .request_queue import RequestQueue
from .update import SchedulerUpdates

DRAFT_SLOTS = 0  # max_num_new_slots_for_drafting: 0 for ngram-like drafters, as for none
# ngram-like drafters need no lookahead slots (vllm/config/vllm.py:VllmConfig.num_lookahead_tokens)
NUM_LOOKAHEAD_TOKENS = 0
NO_PREFILL_CADENCE = PrefillCadence()  # a fresh state: nothing deferred, no step counted


class Scheduler(SchedulerUpdates, SchedulerControls):
    def __init__(
        self,
        config: SchedulerConfig,
        requests: dict[str, LiveRequest],
        running: list[LiveRequest],
        waiting: RequestQueue,
        block_pool: BlockPool,
        finished_req_ids: set[str],
        current_step: int,
        grammar_compile_error_reqs: set[str] | None = None,
        prefill_cadence: PrefillCadence = NO_PREFILL_CADENCE,
        pause_state: PauseState = PauseState.UNPAUSED,
        reset_preempted_req_ids: set[str] | None = None,
    ) -> None:
        self.config = config
        self.requests = requests
        self.running = running
        self.waiting = waiting
        self.block_pool = block_pool
        self.kv_cache_manager = KVCacheManager(config, block_pool)
        block_pool.to_front = self.freed_block_to_front  # where a released block goes is this scheduler's call
        self.finished_req_ids = finished_req_ids
        self.current_step = current_step
        self.pause_state = pause_state  # spec/controls.py: set between steps by the engine core
        # Preempted since the last schedule(), which reports them: its own preemptions, and reset_prefix_cache's.
        self.reset_preempted_req_ids: set[str] = reset_preempted_req_ids or set()
        # Requests whose grammar failed to compile, found by schedule(), finished by the next update.
        self.grammar_compile_error_reqs: set[str] = grammar_compile_error_reqs or set()
        self.max_model_len = config.max_model_len
        self.num_spec_tokens = config.num_speculative_tokens
        # 0 for a pooling model from 0.32.0 (spec.rules.sampled_tokens_per_step): it samples nothing after a prefill.
        self.num_sampled_tokens_per_step = config.num_sampled_tokens_per_step
        # The prefill cadence (spec.state.PrefillCadence): kept for every config, as any schedule() may be throttled.
        self.prefill_capacity_bound = prefill_cadence.prefill_capacity_bound
        self.deferred_waiting: set[str] = set(prefill_cadence.deferred_waiting)
        self.num_executed_steps = prefill_cadence.num_executed_steps
        last = prefill_cadence.last_prefill_step
        self.last_prefill_step = -config.local_prefill_interval if last is None else last  # the first step is free

    def add_request(self, request: Request) -> None:
        """vllm/v1/core/sched/scheduler.py:Scheduler.add_request: a new request joins the back of the waiting queue
        (before 0.31.0 one waiting for its grammar joins the skipped queue: `request_queue.SkippedFirstQueue`)."""
        live = LiveRequest(request, self.config.block_size)
        self.waiting.add_request(live)
        self.requests[request.request_id] = live
        if live.status in BLOCKED_STATUSES:
            self.deferred_waiting.add(request.request_id)  # Scheduler._enqueue_waiting_request

    def grammar_compiled(self, request_id: str, compiled: bool) -> None:
        """The grammar's compile future is done (vllm/v1/structured_output/request.py:
        StructuredOutputRequest._check_grammar_completion): the next pass that reaches the request sees it."""
        request = self.requests.get(request_id)
        if request is not None and request.grammar == GRAMMAR_COMPILING:
            request.grammar = GRAMMAR_COMPILED if compiled else GRAMMAR_FAILED

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        """`throttle_prefills`: a DP engine core's step off its cadence (`Workload.throttle_prefills`)."""
        config = self.config
        self.current_step += 1
        scheduled_new_reqs: list[LiveRequest] = []
        scheduled_resumed_reqs: list[LiveRequest] = []
        scheduled_running_reqs: list[LiveRequest] = []
        preempted_reqs: list[LiveRequest] = []
        req_to_new_blocks: dict[str, list[int]] = {}
        num_scheduled_tokens: dict[str, int] = {}
        scheduled_spec_decode_tokens: dict[str, tuple[int, ...]] = {}
        # Under PAUSED_ALL nothing is scheduled (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (723-725)).
        token_budget = rules.paused_token_budget(self.pause_state, config.token_budget)
        input_budget = config.max_num_batched_tokens
        draft_slots = DRAFT_SLOTS
        prefill_scheduled = False
        prefill_admitted = False  # a waiting request admitted with prompt left to compute

        # The prefill cadence: hold every prefill back this step, DP-throttled or (0.33.0, no DP) local, while a
        # decode runs and the last release step drained the queue
        # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (750-791)).
        defer_prefills = rules.defers_prefills(
            throttle_prefills,
            self.prefill_capacity_bound,
            any(not r.is_prefill_chunk for r in self.running),
            config.local_prefill_interval,
            (self.num_executed_steps + 1) - self.last_prefill_step,
        )

        # The threshold is fixed once per step from the number of eligible requests
        # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (754-769)).
        long_prefill_token_threshold = rules.effective_threshold(
            config.long_prefill_token_threshold,
            len(self.running) + len(self.waiting),
            config.long_prefill_token_threshold_adaptive,
            input_budget,
            config.vllm_version,
        )

        # ---- First, schedule the RUNNING requests. ----
        # vllm/v1/core/sched/scheduler.py:Scheduler.schedule (793-1037)
        req_index = 0
        while req_index < len(self.running) and token_budget > 0:
            request = self.running[req_index]
            if input_budget <= draft_slots:
                break
            if rules.async_max_tokens_reached(  # async only (Z2)
                request.num_output_placeholders,
                request.num_computed_tokens,
                request.num_prompt_tokens,
                request.max_tokens,
            ):
                req_index += 1
                continue
            if rules.decode_cadence_waits(self.current_step, request.next_decode_eligible_step):
                # Async with PP: `decode_stagger` schedule() calls between two decodes of a request
                # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (816-820)).
                req_index += 1
                continue
            if defer_prefills and request.is_prefill_chunk:
                req_index += 1  # its next chunk waits for a step on the cadence; decodes fill this one
                continue

            num_new_tokens = self.grant(
                request, long_prefill_token_threshold, min(token_budget, input_budget - draft_slots)
            )
            if num_new_tokens == 0:
                # `continue`, not `break`: deliberately not strict FCFS
                # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (905-907)).
                req_index += 1
                continue

            while True:
                new_blocks = self.kv_cache_manager.allocate_slots(
                    request, num_new_tokens, num_lookahead_tokens=NUM_LOOKAHEAD_TOKENS
                )
                if new_blocks is not None:
                    break
                # No room: preempt by recompute until it fits or `request` itself is the victim.
                # vllm/v1/core/sched/scheduler.py:Scheduler.schedule (930-970): pick the victim, then take it out.
                victim_index = self.victim_index()
                preempted_req = self.running.pop(victim_index)
                if config.policy == "priority":
                    if victim_index < req_index:
                        req_index -= 1
                    if preempted_req in scheduled_running_reqs:
                        # Undo its grant this step (Z1): tokens, blocks entry, drafts.
                        scheduled_running_reqs.remove(preempted_req)
                        restored = num_scheduled_tokens.pop(preempted_req.request_id)
                        token_budget += restored
                        input_budget += restored + draft_slots
                        req_to_new_blocks.pop(preempted_req.request_id)
                        scheduled_spec_decode_tokens.pop(preempted_req.request_id, None)
                self._preempt_request(preempted_req)
                preempted_reqs.append(preempted_req)
                if preempted_req is request:
                    break

            if new_blocks is None:
                if request.status == RequestStatus.PREEMPTED and rules.self_preemption_continues(
                    config.policy, config.vllm_version
                ):
                    continue  # it removed itself; req_index already points at the next one
                break  # FCFS: it preempted itself, so it was the tail; the pass ends

            scheduled_running_reqs.append(request)
            prefill_scheduled |= request.is_prefill_chunk
            req_to_new_blocks[request.request_id] = new_blocks
            num_scheduled_tokens[request.request_id] = num_new_tokens
            token_budget -= num_new_tokens
            input_budget -= num_new_tokens + draft_slots
            req_index += 1
            if request.spec_token_ids:
                num_scheduled_spec_tokens = rules.num_scheduled_spec_tokens(
                    num_new_tokens, request.num_computed_tokens, request.num_tokens, request.num_output_placeholders
                )
                if num_scheduled_spec_tokens > 0:
                    scheduled_spec_decode_tokens[request.request_id] = tuple(
                        request.spec_token_ids[:num_scheduled_spec_tokens]
                    )
                request.spec_token_ids = []

        # The adapters that hold LoRA slots: every running request's, scheduled in this step or not (before 0.33.0
        # only the scheduled ones') (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1038-1047)).
        scheduled_loras: set[int] = set()
        if config.max_loras is not None:
            holders = self.running if rules.lora_counts_every_running(config.vllm_version) else scheduled_running_reqs
            scheduled_loras = {r.request.lora_int_id for r in holders if r.request.lora_int_id > 0}
            # Before 0.33.0 async scheduling can break it, and vLLM's own assertion kills the engine: the reference
            # fails alike (docs/features.md, "vLLM behaviour the spec declares a bug").
            assert len(scheduled_loras) <= config.max_loras

        # ---- Next, schedule the WAITING requests, unless this step preempted or a pause holds them. ----
        # vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1049-1616). PAUSED_NEW lets only requests that hold KV
        # blocks through (none in the spec's scope): the pass runs and takes nobody.
        if self.admission_allowed(len(preempted_reqs)) and rules.pause_runs_waiting_pass(
            self.pause_state, config.vllm_version
        ):
            step_skipped_waiting: deque[LiveRequest] = deque()
            while token_budget > 0:
                if not self.waiting or not rules.pause_admits_waiting(self.pause_state) or input_budget <= draft_slots:
                    break
                if len(self.running) >= config.max_num_active_reqs:
                    break
                request = self.waiting.peek_request()
                # Skipped this step, in vLLM's order: a request waiting for its grammar to compile, a preempted
                # one whose output from before the preemption is still in flight (it waits until that has
                # drained), and one whose adapter would exceed max_loras.
                if (
                    not self._handle_blocked_waiting_request(request)
                    or (request.num_stale_output_tokens and not request.drop_stale_output)
                    or rules.lora_limit_skips(
                        request.request.lora_int_id,
                        request.request.lora_int_id in scheduled_loras,
                        len(scheduled_loras),
                        config.max_loras,
                    )
                ):
                    step_skipped_waiting.appendleft(self.waiting.pop_request())
                    continue

                # Waiting requests hold no KV (C == 0), so every one looks up the prefix cache;
                # a preempted one may hit its own earlier blocks, outputs included.
                new_computed_blocks, num_new_local_computed_tokens = self.kv_cache_manager.get_computed_blocks(request)
                num_computed_tokens = num_new_local_computed_tokens
                if defer_prefills and rules.admits_a_prefill(num_computed_tokens, request.num_tokens):
                    break  # the pass ends: prefills wait for a step on the cadence
                request_token_budget = min(token_budget, input_budget - draft_slots)
                # num_tokens, not the prompt: a resumed request recomputes its outputs too.
                num_new_tokens = request.num_tokens - num_computed_tokens
                pad_spec_decode = rules.pads_spec_decode(
                    self.num_spec_tokens,
                    num_new_tokens,
                    prefill_scheduled,
                    bool(scheduled_running_reqs),
                    num_computed_tokens,
                    self.max_model_len,
                    config.vllm_version,
                )
                # A decode-like admission is padded to 1 + k for CUDA-graph uniformity (T40).
                if rules.padded_admission_breaks(
                    pad_spec_decode,
                    self.num_spec_tokens,
                    request_token_budget,
                    num_computed_tokens,
                    self.max_model_len,
                    config.vllm_version,
                ):
                    break  # "prefer to not schedule than schedule un-padded"
                # The threshold comes after the padding: the bug of exp1, refused by the config.
                num_new_tokens = rules.waiting_num_new_tokens(
                    request.num_tokens,
                    num_computed_tokens,
                    long_prefill_token_threshold,
                    1 + self.num_spec_tokens if pad_spec_decode else 0,
                )
                if not config.enable_chunked_prefill and num_new_tokens > request_token_budget:
                    break  # head-of-line blocking
                num_new_tokens = min(num_new_tokens, request_token_budget)
                assert num_new_tokens > 0

                new_blocks = self.kv_cache_manager.allocate_slots(
                    request,
                    num_new_tokens,
                    num_new_computed_tokens=num_new_local_computed_tokens,
                    new_computed_blocks=new_computed_blocks,
                    num_lookahead_tokens=NUM_LOOKAHEAD_TOKENS,
                    full_sequence_must_fit=config.scheduler_reserve_full_isl,
                    has_scheduled_reqs=bool(self.running),
                )
                if new_blocks is None:
                    break  # head-of-line blocking: a smaller request behind it is not tried

                request = self.waiting.pop_request()
                self.running.append(request)
                self.deferred_waiting.discard(request.request_id)
                prefill_admitted |= rules.admits_a_prefill(num_computed_tokens, request.num_tokens)
                if config.max_loras is not None and request.request.lora_int_id:
                    scheduled_loras.add(request.request.lora_int_id)
                if request.status == RequestStatus.WAITING:
                    scheduled_new_reqs.append(request)
                elif request.status == RequestStatus.PREEMPTED:
                    scheduled_resumed_reqs.append(request)
                else:
                    raise RuntimeError(f"Invalid request status: {request.status}")
                req_to_new_blocks[request.request_id] = list(request.block_ids)  # all blocks
                num_scheduled_tokens[request.request_id] = num_new_tokens
                token_budget -= num_new_tokens
                input_budget -= num_new_tokens + draft_slots
                request.status = RequestStatus.RUNNING
                request.num_computed_tokens = num_computed_tokens  # the prefix hit becomes computed
                if pad_spec_decode:
                    # vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1579); the config check makes it safe.
                    assert num_new_tokens == 1 + self.num_spec_tokens
                    scheduled_spec_decode_tokens[request.request_id] = (-1,) * self.num_spec_tokens
            # Skipped requests go back to the head in their original order (T38, Z5).
            self.waiting.prepend_requests(step_skipped_waiting)
            self.deferred_waiting.update(r.request_id for r in step_skipped_waiting)
            if not defer_prefills:  # a release step: could it drain the queue? (1612-1616)
                self.prefill_capacity_bound = rules.prefill_capacity_bound(
                    len(self.waiting), len(self.deferred_waiting)
                )
        if config.local_prefill_interval > 1:  # the local cadence counts executed steps (1619-1629)
            if num_scheduled_tokens:
                self.num_executed_steps += 1
            if prefill_scheduled or prefill_admitted:
                self.last_prefill_step = self.num_executed_steps

        # ---- The step's own assertions (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1619-1639)). ----
        assert sum(num_scheduled_tokens.values()) <= config.token_budget
        assert token_budget >= 0 and input_budget >= 0
        assert len(self.running) <= config.max_num_running_reqs
        assert len(scheduled_new_reqs) + len(scheduled_resumed_reqs) + len(scheduled_running_reqs) <= len(self.running)

        output = SchedulerOutput(
            num_scheduled_tokens=num_scheduled_tokens,
            # The V2 model runner lists resumed requests as new, with all their blocks
            # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1642-1644)).
            scheduled_new_reqs=tuple(
                NewRequestData(r.request_id, r.num_computed_tokens, tuple(req_to_new_blocks[r.request_id]), resumed)
                for reqs, resumed in ((scheduled_new_reqs, False), (scheduled_resumed_reqs, True))
                for r in reqs
            ),
            scheduled_cached_reqs=tuple(
                CachedRequestData(r.request_id, r.num_computed_tokens, tuple(req_to_new_blocks[r.request_id]) or None)
                for r in scheduled_running_reqs
            ),
            scheduled_spec_decode_tokens=scheduled_spec_decode_tokens,
            preempted_req_ids=frozenset(self.reset_preempted_req_ids),
            finished_req_ids=frozenset(self.finished_req_ids),
        )
        self._update_after_schedule(output)
        return output

    # ---- The step's decisions, one method each: override one to derive an engine that changes one rule. ----

    def grant(self, request: LiveRequest, long_prefill_token_threshold: int, token_budget: int) -> int:
        """The tokens a RUNNING request gets at its turn: what it is owed, then the threshold, the budget and the
        position bound (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (839-857)); 0 skips it this step."""
        num_new_tokens: int = rules.running_num_new_tokens(
            request.num_owed_tokens,
            long_prefill_token_threshold,
            token_budget,
            self.max_model_len,
            request.num_computed_tokens,
            self.num_sampled_tokens_per_step,
        )
        return num_new_tokens

    def victim_index(self) -> int:
        """Where in `running` the request to preempt sits: the least important one under PRIORITY, the newest
        (the tail) under FCFS (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (930-938))."""
        if self.config.policy == "priority":
            preempted_req = max(self.running, key=lambda r: victim_key(r.priority, r.arrival_time))
            return self.running.index(preempted_req)
        victim_index: int = rules.fcfs_victim_index(len(self.running))
        return victim_index

    def admission_allowed(self, num_preempted: int) -> bool:
        """Whether the WAITING pass runs: not in a step that preempted
        (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1050))."""
        allowed: bool = rules.waiting_pass_allowed(num_preempted)
        return allowed

    def _handle_blocked_waiting_request(self, request: LiveRequest) -> bool:
        """Whether the pass may go on with `request`, else it is skipped this step
        (vllm/v1/core/sched/scheduler.py:Scheduler._handle_blocked_waiting_request; before 0.32.0
        `_try_promote_blocked_waiting_request`). A grammar still compiling is skipped; one that failed is skipped
        and noted, and the step's update finishes the request with FINISHED_ERROR; a compiled one is promoted
        to WAITING and the pass goes on with it at once."""
        waiting_for_grammar = request.status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
        if not rules.waits_for_grammar(waiting_for_grammar, request.grammar == GRAMMAR_COMPILED):
            if waiting_for_grammar:
                request.status = RequestStatus.WAITING  # compiled: promoted, and tested for admission now
            return True
        if request.grammar == GRAMMAR_FAILED:
            self.grammar_compile_error_reqs.add(request.request_id)
        return False

    def freed_block_to_front(self, block: int) -> bool:
        """Whether a block whose last holder released it is reused first (the front of the free queue) rather
        than kept for the prefix cache at the tail (vllm/v1/core/block_pool.py:BlockPool.free_blocks)."""
        return self.block_pool.frees_to_front(block)

    def _preempt_request(self, request: LiveRequest, drop_stale_output: bool = False) -> None:
        """Preemption by recompute (vllm/v1/core/sched/scheduler.py:Scheduler._preempt_request); the caller has
        already removed it from `running`. `drop_stale_output`: `reset_prefix_cache`'s, whose
        in-flight output is dropped.

        The new counter values come from `spec.rules.preempted_counters`, which the
        Z3 encoding applies too. This method only stores them, field by field and
        in vLLM's order, so that a planted bug in one store (a mutant) stays here.
        Freeing the blocks and requeueing act on the pool and the queue, which
        the encoding abstracts to counts and positions.
        """
        assert request.status == RequestStatus.RUNNING, "Only running requests can be preempted"
        after = preempted_counters(
            request.num_in_flight_tokens,
            request.num_stale_output_tokens,
            request.drop_stale_output,
            request.num_preemptions,
            drop_stale_output,
        )
        self.kv_cache_manager.free(request)
        request.status = after.status
        request.num_computed_tokens = after.num_computed_tokens
        request.spec_token_ids = request.spec_token_ids[: after.num_spec_tokens]
        request.drop_stale_output = after.drop_stale_output
        request.num_stale_output_tokens = after.num_stale_output_tokens
        request.num_output_placeholders = after.num_output_placeholders
        request.num_preemptions = after.num_preemptions
        self.waiting.prepend_request(request)
        self.reset_preempted_req_ids.add(request.request_id)

    def _update_after_schedule(self, output: SchedulerOutput) -> None:
        """C advances when a step is scheduled, not when it finishes: it counts optimistically
        (vllm/v1/core/sched/scheduler.py:Scheduler._update_after_schedule)."""
        for req_id, num_scheduled_token in output.num_scheduled_tokens.items():
            request = self.requests[req_id]
            request.num_computed_tokens += num_scheduled_token
            request.num_in_flight_tokens += num_scheduled_token
            request.is_prefill_chunk = request.num_computed_tokens < (
                request.num_tokens + request.num_output_placeholders
            )
        self.finished_req_ids = set()
        self.reset_preempted_req_ids = set()
