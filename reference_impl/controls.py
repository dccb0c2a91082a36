"""The scheduler's calls outside `schedule()`: `reset_prefix_cache` and `set_pause_state` (`spec/controls.py`).

Both are vLLM's `Scheduler` methods, called by the engine core between steps
(a weight update's cache reset, a pause, `release_kv_cache_memory`). A reset
with `reset_running_requests` is the one preemption that happens outside
`schedule()`: every running request is preempted, the tail first, so the
waiting queue holds them in their running order, and each one's in-flight
output is dropped rather than delivered. The next `schedule()` reports them
in `preempted_req_ids` (vLLM's `reset_preempted_req_ids`, which its own
preemptions join), and admits as usual: a preemption outside the step does
not stop the waiting pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..spec.controls import PauseState
from .block_pool import BlockPool
from .live_request import LiveRequest

if TYPE_CHECKING:
    from ..spec.config import SchedulerConfig


class SchedulerControls:
    # Part of vLLM's Scheduler class; `Scheduler.__init__` sets what these methods read of it.
    config: SchedulerConfig
    running: list[LiveRequest]
    block_pool: BlockPool
    pause_state: PauseState

    if TYPE_CHECKING:

        def _preempt_request(self, request: LiveRequest, drop_stale_output: bool = False) -> None: ...

    def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        """vllm/v1/core/sched/scheduler.py:Scheduler.reset_prefix_cache (3184-3227): with `reset_running_requests`,
        preempt every running request from the tail, dropping its in-flight output; then empty the cache, which
        succeeds only if every block is free."""
        if reset_running_requests:
            while self.running:
                request = self.running.pop()
                self._preempt_request(request, drop_stale_output=True)
        reset_successful = self.block_pool.reset_prefix_cache(self.config.num_gpu_blocks)
        # vLLM raises here (3213-3219) only for requests waiting for remote KV, outside the spec's scope.
        assert reset_successful or not reset_running_requests
        return reset_successful

    def set_pause_state(self, pause_state: PauseState) -> None:
        """vllm/v1/core/sched/scheduler.py:Scheduler.set_pause_state: read by the next schedule()."""
        self.pause_state = PauseState(pause_state)
