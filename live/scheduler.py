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
  are that mixin over vLLM's `Scheduler` and `AsyncScheduler`. A session
  follows the class (it decides the scheduler's own bookkeeping); the
  capture's header also records the engine's own flag
  (`engine_async_scheduling`), because the two can disagree: vLLM's CPU
  platform forces `scheduler_config.async_scheduling = False` and still
  builds the `AsyncScheduler` it was named
  (vllm/platforms/cpu.py:CpuPlatform.check_and_update_config), so EngineCore
  runs its synchronous `step()`, while vLLM's own tests drive the same class
  with a batch queue. The replay tells the two loops apart by the updates'
  `of_step` (`conformance/live_replay/capture.py:loop_shape`).
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
from .settings import LiveSettingsError

logger = init_logger("vllm.schedspec.live")


class MonitoredSchedulerMixin:
    """The overrides; put it first in the bases, before a vLLM scheduler class.

    Each override calls vLLM's method whatever happens to the session: a
    scheduler built without `__init__` (`object.__new__`, as some of vLLM's
    tests do), a session that failed to start, or one switched off after an
    internal error, is vLLM's scheduler unchanged. Only a monitor's verdict
    in `raise` mode, or a bad $SCHEDSPEC_LIVE at start-up, ever raises.
    """

    live: LiveSession | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.live = None
        try:
            self.live = LiveSession(self, logger, isinstance(self, AsyncScheduler))
        except LiveSettingsError:
            raise  # the user's setting, refused at start-up in one line (docs/live.md)
        except Exception as e:  # noqa: BLE001 - a session that cannot start must not stop the server
            logger.warning(
                "schedspec.live: could not start, monitoring and capture are off: %s: %s", type(e).__name__, e
            )

    def _session(self) -> LiveSession | None:
        """The session, if this scheduler has one that is on (`__dict__`: no class attribute stands in for it)."""
        live = self.__dict__.get("live")
        return live if live is not None and live.on else None

    def add_request(self, request: Any) -> None:
        self._live_before("A")
        super().add_request(request)  # type: ignore[misc]
        if (live := self._session()) is not None:
            live.on_add(request)

    def finish_requests(self, request_ids: Any, finished_status: Any) -> Any:
        if self.__dict__.get("_live_in_update"):  # the update's own (failed grammars): its record reports them
            return super().finish_requests(request_ids, finished_status)  # type: ignore[misc]
        self._live_before("A")
        finished = super().finish_requests(request_ids, finished_status)  # type: ignore[misc]
        if (live := self._session()) is not None:
            live.on_finish(request_ids, finished_status, finished)
        return finished

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        self._live_before("S")
        throttled = bool(kwargs.get("throttle_prefills") or any(args[:1]))  # a DP engine core's step off its cadence
        self.__dict__["_live_in_schedule"] = True
        try:
            so = super().schedule(*args, **kwargs)  # type: ignore[misc]
        finally:
            self.__dict__["_live_in_schedule"] = False
        if (live := self._session()) is not None:
            live.on_schedule(so, throttled)
        return so

    def _preempt_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        inside = self.__dict__.get("_live_in_schedule") or self.__dict__.get("_live_in_reset")
        if not inside and (live := self._session()) is not None:
            live.scope_out("a preemption outside schedule() and reset_prefix_cache()")
        return super()._preempt_request(request, *args, **kwargs)  # type: ignore[misc]

    def reset_prefix_cache(self, *args: Any, **kwargs: Any) -> Any:
        """vLLM's (reset_running_requests=False, reset_connector=False), judged as the next step's input."""
        self._live_before("A")
        self.__dict__["_live_in_reset"] = True
        try:
            done = super().reset_prefix_cache(*args, **kwargs)  # type: ignore[misc]
        finally:
            self.__dict__["_live_in_reset"] = False
        if (live := self._session()) is not None:
            live.on_reset(args, kwargs, done)
        return done

    def set_pause_state(self, pause_state: Any) -> None:
        self._live_before("A")
        super().set_pause_state(pause_state)  # type: ignore[misc]
        if (live := self._session()) is not None:
            live.on_pause(pause_state)

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        self._live_before("U")
        live = self._session()
        answer = live.model_answer(scheduler_output, model_runner_output) if live is not None else None
        self.__dict__["_live_in_update"] = True
        try:
            out = super().update_from_output(scheduler_output, model_runner_output)  # type: ignore[misc]
        finally:
            self.__dict__["_live_in_update"] = False
        if live is not None:
            live.on_update(scheduler_output, answer)
        return out

    def update_draft_token_ids(self, draft_token_ids: Any) -> None:
        super().update_draft_token_ids(draft_token_ids)  # type: ignore[misc]
        if (live := self._session()) is not None:
            live.on_drafts(draft_token_ids)

    def shutdown(self) -> None:
        super().shutdown()  # type: ignore[misc]
        if (live := self._session()) is not None:
            live.close()

    def _live_before(self, event: str) -> None:
        """Before a call that changes the state: the record it may close reads the state as it stands."""
        live = self._session()  # None while vLLM's own __init__ runs, and without a session
        if live is not None:
            live.check_scope(event)
        if live is not None and live.on and live.assembler is not None:
            try:
                live.assembler.prepare(event)
            except Exception as e:  # noqa: BLE001 - LiveSession's policy
                live.guard(e)


class MonitoredScheduler(MonitoredSchedulerMixin, Scheduler):  # type: ignore[misc]
    """vLLM's `Scheduler`, monitored and captured as $SCHEDSPEC_LIVE says (`schedspec.live.settings`)."""


class MonitoredAsyncScheduler(MonitoredSchedulerMixin, AsyncScheduler):  # type: ignore[misc]
    """vLLM's `AsyncScheduler`, monitored and captured as $SCHEDSPEC_LIVE says (`schedspec.live.settings`)."""
