"""vLLM's scheduler classes with the spec's monitors and a capture around them, chosen by vLLM's own setting.

Design notes
------------
* vLLM builds its scheduler from `vllm_config.scheduler_config.get_scheduler_cls()`
  (vllm/v1/engine/core.py), which takes a dotted path: so
  `--scheduler-cls schedspec.live.MonitoredScheduler` (or the async one,
  with `--async-scheduling`) is the whole integration; nothing in vLLM is
  patched.
* Each class subclasses vLLM 0.33.0's own and changes no decision: every
  override calls vLLM's method first (or, for `schedule()`, only reads the
  state before it) and hands the objects to a `LiveSession`, which only reads.
* `MonitoredSchedulerMixin` holds the overrides, so a scheduler of one's own
  (a fork, or a test's planted bug) gets monitored as
  `class Mine(MonitoredSchedulerMixin, MyScheduler)`; the two classes here
  are that mixin over vLLM's `Scheduler` and `AsyncScheduler`. Whether a
  session is async is read from the class (`AsyncScheduler` in its bases),
  the way the spec's config reads it.
* This module imports vLLM and so loads only where vLLM is installed;
  `schedspec.live` resolves its names lazily, so the pure parts (settings,
  capture, scope, hashing) load anywhere.
"""

from __future__ import annotations

from typing import Any

from vllm.logger import init_logger  # type: ignore[import-not-found]
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # type: ignore[import-not-found]
from vllm.v1.core.sched.scheduler import Scheduler  # type: ignore[import-not-found]

from .session import LiveSession

logger = init_logger("vllm.schedspec.live")


class MonitoredSchedulerMixin:
    """The overrides; put it first in the bases, before a vLLM scheduler class."""

    live: LiveSession

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.live = LiveSession(self, logger, isinstance(self, AsyncScheduler))

    def add_request(self, request: Any) -> None:
        self._live_before("A")
        super().add_request(request)  # type: ignore[misc]
        self.live.on_add(request)

    def finish_requests(self, request_ids: Any, finished_status: Any) -> Any:
        self._live_before("A")
        finished = super().finish_requests(request_ids, finished_status)  # type: ignore[misc]
        self.live.on_finish(request_ids, finished_status, finished)
        return finished

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        self._live_before("S")
        so = super().schedule(*args, **kwargs)  # type: ignore[misc]
        self.live.on_schedule(so)
        return so

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        self._live_before("U")
        sampled = self.live.sampled(scheduler_output, model_runner_output)
        out = super().update_from_output(scheduler_output, model_runner_output)  # type: ignore[misc]
        self.live.on_update(scheduler_output, sampled)
        return out

    def update_draft_token_ids(self, draft_token_ids: Any) -> None:
        super().update_draft_token_ids(draft_token_ids)  # type: ignore[misc]
        self.live.on_drafts(draft_token_ids)

    def shutdown(self) -> None:
        super().shutdown()  # type: ignore[misc]
        self.live.close()

    def _live_before(self, event: str) -> None:
        """Before a call that changes the state: the record it may close reads the state as it stands."""
        live = getattr(self, "live", None)  # None while vLLM's own __init__ runs
        if live is not None and live.on and live.assembler is not None:
            try:
                live.assembler.prepare(event)
            except Exception as e:  # noqa: BLE001 - LiveSession's policy
                live._guard(e)


class MonitoredScheduler(MonitoredSchedulerMixin, Scheduler):  # type: ignore[misc]
    """vLLM's `Scheduler`, monitored and captured as $SCHEDSPEC_LIVE says (`schedspec.live.settings`)."""


class MonitoredAsyncScheduler(MonitoredSchedulerMixin, AsyncScheduler):  # type: ignore[misc]
    """vLLM's `AsyncScheduler`, monitored and captured as $SCHEDSPEC_LIVE says (`schedspec.live.settings`)."""
