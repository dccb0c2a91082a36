"""The engine's calls outside `schedule()`: resetting the prefix cache, pausing, resuming, releasing KV memory.

A deployment reaches the scheduler between steps, not only through
requests: an RLHF loop resets the prefix cache after a weight update, a
sleep or a user pauses generation, and `release_kv_cache_memory` discards
the KV cache of a paused engine. Each call is a `Control` in the workload,
applied before its step's `schedule()`, after the step's arrivals, aborts
and grammars (the engine core's input queue, in which they arrive).

The workload names the engine core's calls, as a client makes them
(vllm/v1/engine/core.py:EngineCoreProc.pause_scheduler, `resume_scheduler`,
`EngineCore.reset_prefix_cache`, `release_kv_cache_memory`). The loop
(`spec.engine`, through `EngineControls`) turns each into the scheduler's
own calls, which are all an engine sees and all a trace records
(`ControlCall`):

* `reset_prefix_cache(reset_running_requests)` (vllm/v1/core/sched/scheduler.py:Scheduler.reset_prefix_cache):
  with `reset_running_requests`, every running request is preempted, the
  tail first, with its in-flight output dropped, and the preemptions are
  reported by the next `schedule()`; then the cache is emptied if every
  block is free. It answers whether it was.
* `set_pause_state(PauseState)`: PAUSED_NEW admits nothing from the
  waiting queue (only requests that hold KV blocks, none in the spec's
  scope), PAUSED_ALL schedules nothing at all.
* A pause in mode `abort` first aborts every request, in the order they
  were added (`Scheduler.finish_requests(None, ...)`: the step's `aborted`).
  Its `clear_cache` resets the cache with the running requests once the
  engine has no work: at once if it has none, else before the first step
  that finds it idle (`EngineCoreProc._idle_state_callbacks`).
* `release_kv_cache_memory` needs a completed pause: paused, nothing the
  pause lets run, no batch in flight. Then it resets as above. Otherwise vLLM
  raises to the caller and nothing changes: the loop records nothing.

With a batch queue (async scheduling or pipeline parallel) the engine core
steps only when the scheduler has requests by its pause-aware count
(`Scheduler.get_num_unfinished_requests`), so a paused step that finds none
calls no `schedule()` (`StepRecord.scheduled`). The synchronous loop calls
`schedule()` at every step, paused or not, as it always has and as vLLM's own
tests do: under PAUSED_ALL that schedule grants nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InfrastructureError, SpecError

# The workload's calls, and the arguments each takes (every other key is refused).
CALLS: dict[str, tuple[str, ...]] = {
    "reset_prefix_cache": ("reset_running_requests", "before_inputs"),
    "pause": ("mode", "clear_cache", "before_inputs"),
    "resume": ("before_inputs",),
    "release_kv_cache_memory": ("before_inputs",),
}
PAUSE_MODES = ("abort", "wait", "keep")  # vLLM's PauseMode, vllm/v1/engine/core.py:EngineCore.pause_scheduler


class PauseState(enum.IntEnum):
    """vllm/v1/core/sched/interface.py:PauseState (24-35), with vLLM's values."""

    UNPAUSED = 0
    PAUSED_NEW = 1
    PAUSED_ALL = 2


@dataclass(frozen=True)
class Control:
    """One call a client makes on the engine core before `step`'s schedule(); see the module docstring."""

    step: int
    call: str
    reset_running_requests: bool = False  # reset_prefix_cache
    mode: str = "abort"  # pause
    clear_cache: bool = True  # pause
    # Made before the step's arrivals and aborts, not after them (a live capture's order, `replay-live`).
    before_inputs: bool = False

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"step": self.step, "call": self.call}
        for name in CALLS.get(self.call, ()):
            if name != "before_inputs" or self.before_inputs:
                d[name] = getattr(self, name)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any], where: str) -> Control:
        call = d["call"]
        if call not in CALLS:
            raise SpecError(f"{where}.call", call, f"is not one of {', '.join(CALLS)}")
        for key in d:
            if key not in ("step", "call", *CALLS[call]):
                raise SpecError(f"{where}.{key}", d[key], f"is not an argument of {call}")
        if call == "pause" and d.get("mode", "abort") not in PAUSE_MODES:
            raise SpecError(f"{where}.mode", d["mode"], f"is not one of {', '.join(PAUSE_MODES)}")
        if call == "pause" and d.get("mode", "abort") == "abort" and d.get("before_inputs"):
            raise SpecError(f"{where}.before_inputs", True, "is not for a pause in mode abort, whose aborts come last")
        return cls(d["step"], call, **{k: d[k] for k in CALLS[call] if k in d})


@dataclass(frozen=True)
class ControlCall:
    """A scheduler call a control made, as a trace records it: `reset_prefix_cache` with what it answered, or
    `set_pause_state`."""

    call: str
    reset_running_requests: bool = False
    result: bool = True  # reset_prefix_cache's answer: whether the cache was emptied
    pause_state: PauseState = PauseState.UNPAUSED
    # Made before the step's arrivals and aborts: a pending pause's cache clear, when the engine found itself idle,
    # or a control so placed (`Control.before_inputs`).
    before_inputs: bool = False

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any]
        if self.call == "set_pause_state":
            d = {"call": self.call, "pause_state": self.pause_state.name}
        else:
            d = {"call": self.call, "reset_running_requests": self.reset_running_requests, "result": self.result}
        return {**d, "before_inputs": True} if self.before_inputs else d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ControlCall:
        if d["call"] == "set_pause_state":
            return cls(
                "set_pause_state",
                pause_state=PauseState[d["pause_state"]],
                before_inputs=d.get("before_inputs", False),
            )
        return cls(
            "reset_prefix_cache", d["reset_running_requests"], d["result"], before_inputs=d.get("before_inputs", False)
        )


def pause_state_after(pause_state: PauseState, calls: tuple[ControlCall, ...]) -> PauseState:
    """The pause state once a step's control calls are applied."""
    for c in calls:
        if c.call == "set_pause_state":
            pause_state = c.pause_state
    return pause_state


def has_requests(pause_state: PauseState, running: bool, waiting: bool, unreported: bool) -> bool:
    """Whether the engine core steps: vllm/v1/core/sched/scheduler.py:Scheduler.get_num_unfinished_requests
    counts nothing under PAUSED_ALL and only running requests (and KV holders, none in scope) under PAUSED_NEW;
    finished requests not yet reported count in every state (`has_finished_requests`)."""
    if pause_state == PauseState.PAUSED_ALL:
        return unreported
    if pause_state == PauseState.PAUSED_NEW:
        return running or unreported
    return running or waiting or unreported


class EngineControls:
    """The engine core's side of the controls over one run: the pause state it set, a pause whose cache clear
    waits for the engine to go idle, and the order requests were added in (an `abort` pause finishes them so).

    The loop calls `when_idle` at the start of each step, then `apply` after the step's arrivals, aborts and
    grammars. Both call the engine's `reset_prefix_cache` and `set_pause_state` and return what they called.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.pause_state = PauseState.UNPAUSED
        self.pending_clears = 0  # pauses whose cache clear waits for the engine to go idle (one callback each)
        self.added: dict[str, None] = {}  # every request added so far, in order (vLLM's `requests` dict)

    def has_requests(self, running: bool, waiting: bool, unreported: bool) -> bool:
        return has_requests(self.pause_state, running, waiting, unreported)

    def _idle(self, unreported: bool, in_flight: bool) -> bool:
        """vllm/v1/engine/core.py:EngineCoreProc.has_work, negated: nothing to step and no batch in flight."""
        s = self.engine.summary()
        return not in_flight and not self.has_requests(bool(s.running), bool(s.waiting), unreported)

    def when_idle(self, unreported: bool, in_flight: bool) -> tuple[ControlCall, ...]:
        """A pending pause completes once the engine has no work (`EngineCoreProc._process_input_queue` runs the
        idle callbacks before it takes the next input), and its `clear_cache` resets the cache then."""
        if not self.pending_clears or not self._idle(unreported, in_flight):
            return ()
        pending, self.pending_clears = self.pending_clears, 0
        return tuple(self._reset(True, before_inputs=True) for _ in range(pending))

    def apply(
        self, controls: list[Control], unreported: bool, in_flight: bool, abort: Any
    ) -> tuple[tuple[ControlCall, ...], tuple[str, ...]]:
        """Apply controls in order; `abort(ids)` aborts requests as the loop does and returns their ids. Returns
        the scheduler calls made (a reset of a `before_inputs` control says so) and the requests an `abort` pause
        aborted."""
        calls: list[ControlCall] = []
        aborted: tuple[str, ...] = ()
        for c in controls:
            if c.call == "reset_prefix_cache":
                calls.append(self._reset(c.reset_running_requests, c.before_inputs))
            elif c.call == "resume":
                # A pending pause's callback stays registered: it still clears the cache when the engine next idles.
                calls.append(self._set(PauseState.UNPAUSED, c.before_inputs))
            elif c.call == "pause":
                if c.mode == "abort":
                    live = self.engine.summary().requests
                    aborted += abort([rid for rid in self.added if rid in live])
                    unreported = unreported or bool(aborted)
                state = PauseState.PAUSED_ALL if c.mode == "keep" else PauseState.PAUSED_NEW
                calls.append(self._set(state, c.before_inputs))
                if c.clear_cache and self._idle(unreported, in_flight):  # EngineCoreProc._pause_complete
                    calls.append(self._reset(True, c.before_inputs))
                elif c.clear_cache:
                    self.pending_clears += 1
            elif self.pause_state != PauseState.UNPAUSED and self._idle(unreported, in_flight):
                calls.append(self._reset(True, c.before_inputs))  # release_kv_cache_memory after a completed pause
        return tuple(calls), aborted

    def _reset(self, reset_running_requests: bool, before_inputs: bool = False) -> ControlCall:
        result = self.engine.reset_prefix_cache(reset_running_requests)
        if not isinstance(result, bool):  # a mistyped answer is the engine's failure, never a verdict (exit 3)
            raise InfrastructureError(
                f"engine {self.engine.name!r}: reset_prefix_cache()",
                result,
                f"answered malformed output: {result!r} is of type {type(result).__name__}, not 'boolean'",
                kind="malformed",
            )
        return ControlCall("reset_prefix_cache", reset_running_requests, result, before_inputs=before_inputs)

    def _set(self, pause_state: PauseState, before_inputs: bool = False) -> ControlCall:
        self.pause_state = pause_state
        self.engine.set_pause_state(pause_state)
        return ControlCall("set_pause_state", pause_state=pause_state, before_inputs=before_inputs)
