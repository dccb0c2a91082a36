"""`AsyncScheduler`: the scheduler when the next step is scheduled before the last one's output is back.

vLLM 0.33.0 keeps everything async in the base class (in-flight and stale
counters, the max-tokens skip rule, placeholder decrements in
`update_from_output`) except one thing, the only place placeholders grow
(`vllm/v1/core/sched/async_scheduler.py:AsyncScheduler._update_after_schedule`):
after the base class has advanced C, every scheduled request that is not
mid-prefill is owed its sampled token (none for a pooling model from
0.32.0) plus any drafts as output placeholders, and gets `[-1] * k` placeholder
drafts, which the worker fills in. So the next step already schedules
1 + k tokens for it, one step ahead of its output (§6, D2). With pipeline
parallel it also may not decode again for `pp_size` schedule() calls (the
V2 model runner's cadence, `next_decode_eligible_step`).
"""

from __future__ import annotations

from ..spec.output import SchedulerOutput
from . import rules
from .scheduler import Scheduler


class AsyncScheduler(Scheduler):
    def _update_after_schedule(self, output: SchedulerOutput) -> None:
        super()._update_after_schedule(output)
        spec_token_placeholders = [-1] * self.num_spec_tokens  # num_spec_tokens_to_schedule: no dynamic SD
        for req_id in output.num_scheduled_tokens:
            request = self.requests[req_id]
            if request.is_prefill_chunk:
                continue
            num_spec_tokens = len(output.scheduled_spec_decode_tokens.get(req_id, ()))
            request.num_output_placeholders += self.num_sampled_tokens_per_step + num_spec_tokens
            request.spec_token_ids = list(spec_token_placeholders)
            # The V2 model runner's PP decode cadence (the spec's layout is the V2 runner's: SchedulerConfig).
            request.next_decode_eligible_step = rules.next_decode_eligible_step(
                self.current_step, self.config.decode_stagger
            )
