"""The prefill cadence as the decision walk rebuilds it from a trace: whether a step defers prefills, and why.

vllm/v1/core/sched/scheduler.py:Scheduler.schedule (750-791, 1612-1629). A
step defers every prefill (a running request's next prompt chunk, and any
admission with prompt left to compute) when its DP engine core throttles it
(`StepRecord.throttle_prefills`) or, from 0.33.0 outside data parallel, when
fewer than `prefill_schedule_interval` executed steps have passed since the
last one that carried a prefill; either only while a decode runs, and
neither once the last step that did not defer left the waiting queue with a
request it could have served (`prefill_capacity_bound`).

That decision reads what no record states outright, so it is carried here
from step to step, from the records alone: the requests the waiting pass
passed over for a reason of their own or that arrived blocked
(`deferred_waiting`), the capacity flag, and the executed steps and the last
prefill-carrying one. It is kept for every config, as vLLM keeps it: a
step's schedule() may be throttled whatever the interval (vLLM's own tests
call it so).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..config import SchedulerConfig
from ..request import Request
from ..rules import defers_prefills, prefill_capacity_bound
from ..trace import StepRecord


class PrefillCadenceShadow:
    def __init__(self) -> None:
        self.capacity_bound = False
        self.deferred: set[str] = set()
        self.num_executed_steps = 0
        self.last_prefill_step: int | None = None  # None: one interval back, as vLLM starts it
        self.deferring = False  # the last step `defers` judged deferred its prefills (for the view)

    def forget(self, request_ids: Iterable[str]) -> None:
        """Finished or aborted: out of `deferred_waiting` (Scheduler.finish_requests, update_from_output)."""
        self.deferred.difference_update(request_ids)

    def defers(
        self,
        config: SchedulerConfig,
        requests: Mapping[str, Request],
        rec: StepRecord,
        running: Iterable[str],
        prefill_chunk: Mapping[str, bool],
    ) -> bool:
        """Whether this record's schedule() defers prefills; arrivals that wait for a grammar join the deferred."""
        self.deferring = False
        if not rec.scheduled:
            return False
        self.deferred.update(rid for rid in rec.added if requests[rid].structured_output)
        last = -config.local_prefill_interval if self.last_prefill_step is None else self.last_prefill_step
        self.deferring = bool(
            defers_prefills(
                rec.throttle_prefills,
                self.capacity_bound,
                any(not prefill_chunk.get(rid, False) for rid in running),
                config.local_prefill_interval,
                self.num_executed_steps + 1 - last,
            )
        )
        return self.deferring

    def after_passes(
        self,
        config: SchedulerConfig,
        rec: StepRecord,
        deferred_this_step: bool,
        waiting_pass_ran: bool,
        num_waiting_after: int,
        skipped: Iterable[str],
        prefill_carried: bool,
    ) -> None:
        """What the step leaves for the next: admissions leave the deferred set, the pass's skips join it, a step
        that did not defer sets the capacity flag, and the local cadence counts the step."""
        if not rec.scheduled:
            return
        self.deferred.difference_update(n.req_id for n in rec.output.scheduled_new_reqs)
        self.deferred.update(skipped)
        if waiting_pass_ran and not deferred_this_step:
            self.capacity_bound = bool(prefill_capacity_bound(num_waiting_after, len(self.deferred)))
        if config.local_prefill_interval > 1:
            if rec.output.num_scheduled_tokens:
                self.num_executed_steps += 1
            if prefill_carried:
                self.last_prefill_step = self.num_executed_steps
