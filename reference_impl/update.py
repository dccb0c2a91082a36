"""The other half of the scheduler: absorbing model output, and finishing requests.

`update_from_output` (vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output) walks the step's requests in
`num_scheduled_tokens` order, appends each sampled token and checks for a
stop after every one (`stop.py`), trims what follows a stop, and frees the
finished. `finish_requests` (vllm/v1/core/sched/scheduler.py:Scheduler.finish_requests) is the abort path. Both end in
`_free_request`, which frees the blocks in reverse and queues the id for the
next `schedule()`'s `finished_req_ids` (I-18).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..spec.config import SchedulerConfig
from ..spec.output import ModelRunnerOutput, SchedulerOutput
from ..spec.request import RequestStatus
from ..spec.trace import FinishedRequest
from . import rules
from .kv_cache_manager import KVCacheManager
from .live_request import LiveRequest
from .request_queue import RequestQueue
from .stop import check_stop


class SchedulerUpdates:
    # Half of vLLM's Scheduler class; `Scheduler.__init__` sets what these methods read of it.
    requests: dict[str, LiveRequest]
    running: list[LiveRequest]
    waiting: RequestQueue
    kv_cache_manager: KVCacheManager
    finished_req_ids: set[str]
    grammar_compile_error_reqs: set[str]
    deferred_waiting: set[str]
    max_model_len: int
    num_spec_tokens: int
    config: SchedulerConfig

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> dict[str, FinishedRequest]:
        stopped_running_reqs: set[str] = set()
        stopped_preempted_reqs: set[str] = set()
        finished: dict[str, FinishedRequest] = {}
        for req_id, num_tokens_scheduled in scheduler_output.num_scheduled_tokens.items():
            assert num_tokens_scheduled > 0
            request = self.requests.get(req_id)
            output_is_stale = False
            if request is not None:
                request.num_in_flight_tokens -= num_tokens_scheduled
                if request.num_stale_output_tokens > 0:
                    output_is_stale = True
                    request.num_stale_output_tokens -= num_tokens_scheduled
                    assert request.num_stale_output_tokens >= 0
            if request is None or request.is_finished():
                continue  # aborted while in flight
            if output_is_stale and request.drop_stale_output:
                continue

            generated_token_ids = list(model_runner_output.sampled_token_ids.get(req_id, ()))
            scheduled_spec_token_ids = scheduler_output.scheduled_spec_decode_tokens.get(req_id)
            if scheduled_spec_token_ids and generated_token_ids:
                # Rejected drafts roll C (and P) back; both sides of "owed" move together.
                num_rejected = rules.num_rejected_drafts(len(scheduled_spec_token_ids), len(generated_token_ids))
                if not output_is_stale:
                    if request.num_computed_tokens > 0:
                        request.num_computed_tokens -= num_rejected
                    if request.num_output_placeholders > 0:
                        request.num_output_placeholders -= num_rejected

            status_before_stop = request.status
            stopped = False
            if generated_token_ids:
                had_output_placeholders = request.num_output_placeholders > 0
                generated_token_ids, stopped = self._update_request_with_output(
                    request, generated_token_ids, output_is_stale
                )
                if (
                    not output_is_stale
                    and status_before_stop == RequestStatus.RUNNING
                    and rules.caches_on_update(had_output_placeholders, self.num_spec_tokens, self.config.vllm_version)
                ):
                    # Async or spec: register only what is processed, not what is in flight
                    # (vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output (2407-2415)).
                    # It runs before a stopped request is freed, so its blocks free as cached (to the tail).
                    self.kv_cache_manager.cache_blocks(
                        request, request.num_computed_tokens - request.num_in_flight_tokens
                    )
            elif self.config.runner == "pooling" and req_id in model_runner_output.pooler_output:
                # Pooling stops as soon as there is output, stale or not (vllm/v1/core/sched/scheduler.py:
                # Scheduler.update_from_output (2416-2419)).
                request.status = RequestStatus.FINISHED_STOPPED
                stopped = True
            if stopped:
                finished[req_id] = FinishedRequest(request.status, tuple(request.output_token_ids))
                self._free_request(request)
                if status_before_stop == RequestStatus.RUNNING:
                    stopped_running_reqs.add(req_id)
                else:
                    stopped_preempted_reqs.add(req_id)

        # remove_all keeps the survivors' order (vllm/v1/core/sched/utils.py:remove_all).
        if stopped_running_reqs:
            self.running = [r for r in self.running if r.request_id not in stopped_running_reqs]
        if stopped_preempted_reqs:
            self.waiting.remove_requests(r for r in list(self.waiting) if r.request_id in stopped_preempted_reqs)

        # Grammars that failed to compile, found by the last schedule(): those requests end here, with no output.
        error_req_ids, self.grammar_compile_error_reqs = self.grammar_compile_error_reqs, set()
        for request in self.finish_requests(sorted(error_req_ids), RequestStatus.FINISHED_ERROR):
            finished[request.request_id] = FinishedRequest(request.status, tuple(request.output_token_ids))
        return finished

    def _update_request_with_output(
        self, request: LiveRequest, new_token_ids: list[int], is_stale: bool = False
    ) -> tuple[list[int], bool]:
        """Append and check per token; on a stop, trim the rest and keep C one short of T
        (vllm/v1/core/sched/scheduler.py:Scheduler._update_request_with_output)."""
        num_new_tokens = len(new_token_ids)
        stopped = False
        for num_new, output_token_id in enumerate(new_token_ids, 1):
            request.output_token_ids.append(output_token_id)
            stopped = self.check_stop(request)
            if stopped:
                if not is_stale:
                    request.num_computed_tokens -= len(new_token_ids) - num_new
                del new_token_ids[num_new:]
                break
        if not is_stale and request.num_output_placeholders > 0:
            # All returned tokens resolve placeholders, the trimmed ones included.
            request.num_output_placeholders -= num_new_tokens
            assert request.num_output_placeholders >= 0
        return new_token_ids, stopped

    def check_stop(self, request: LiveRequest) -> bool:
        """Whether `request` stops after the token just appended, and how (sets its status): the decision a derived
        engine overrides to change stopping (vllm/v1/core/sched/utils.py:check_stop)."""
        return check_stop(request, self.max_model_len, self.config.vllm_version)

    def update_draft_token_ids(self, draft_token_ids: Mapping[str, Sequence[int]]) -> None:
        """Sync spec decode: the drafter's proposals, set after update_from_output
        (vllm/v1/core/sched/scheduler.py:Scheduler.update_draft_token_ids)."""
        for req_id, spec_token_ids in draft_token_ids.items():
            request = self.requests.get(req_id)
            if request is None or request.is_finished():
                continue  # finished meanwhile
            if request.is_prefill_chunk:
                request.spec_token_ids = []  # drafts for a prefill chunk are dropped (T39)
                continue
            request.spec_token_ids = list(spec_token_ids)

    def finish_requests(self, request_ids: Iterable[str], finished_status: RequestStatus) -> list[LiveRequest]:
        """Abort from outside. Ids are processed in the order given: the free order decides block ids."""
        assert finished_status.is_finished
        # vLLM takes `set(request_ids)` (vllm/v1/core/sched/scheduler.py:Scheduler.finish_requests (2983)), so an id
        # named twice is finished once;
        # dict.fromkeys dedups too but keeps the given order, which decides the free order.
        request_ids = dict.fromkeys([request_ids] if isinstance(request_ids, str) else request_ids)
        valid_requests = []
        for req_id in request_ids:
            request = self.requests.get(req_id)
            if request is None or request.is_finished():
                continue
            valid_requests.append(request)
        running_ids = {r.request_id for r in valid_requests if r.status == RequestStatus.RUNNING}
        if running_ids:
            self.running = [r for r in self.running if r.request_id not in running_ids]
        waiting_reqs = [r for r in valid_requests if r.status != RequestStatus.RUNNING]
        if waiting_reqs:
            self.waiting.remove_requests(waiting_reqs)
        for request in valid_requests:
            request.status = finished_status
            self._free_request(request)
        return valid_requests

    def _free_request(self, request: LiveRequest) -> None:
        """vllm/v1/core/sched/scheduler.py:Scheduler._free_request and `_free_blocks`: report next step, free the
        blocks, forget the request."""
        assert request.is_finished()
        self.finished_req_ids.add(request.request_id)
        self.kv_cache_manager.free(request)
        del self.requests[request.request_id]
        self.deferred_waiting.discard(request.request_id)
