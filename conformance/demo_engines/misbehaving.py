"""Engines that fail as programs, not as schedulers: what the harness must never call a divergence.

Each is a factory usable as `--engine schedspec.conformance.demo_engines.misbehaving:NAME`,
and each stands for a way a real engine was seen to fail: a driver that is
slow to start on a loaded machine, a factory with a bug, a process that
exits under the harness, a step that never returns, an engine that flips a
coin, one that reuses the object it returned. `tests/unit/test_misbehaving_engines.py`
pins the outcome and exit status the harness gives each.
"""

from __future__ import annotations

import dataclasses
import os
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from ...reference_impl import ReferenceEngine
from ...spec.config import SchedulerConfig
from ...spec.output import ModelRunnerOutput, SchedulerOutput
from ...spec.trace import StateSummary
from .planted import FailingAt

SLOW_START_ENV = "SCHEDSPEC_TEST_SLOW_START_S"  # how long `slow_start` takes; the tests set it


def slow_start(config: SchedulerConfig) -> ReferenceEngine:
    """A correct engine that takes a while to start, like a vLLM driver on a machine with load 8."""
    time.sleep(float(os.environ.get(SLOW_START_ENV, "2")))
    return ReferenceEngine(config)


def raising_factory(config: SchedulerConfig) -> ReferenceEngine:
    raise RuntimeError("planted: the factory cannot build the engine")


def none_factory(config: SchedulerConfig) -> None:
    return None


def no_arguments() -> ReferenceEngine:  # the wrong signature: a factory takes the config
    return ReferenceEngine(SchedulerConfig())


def hanging_factory(config: SchedulerConfig) -> ReferenceEngine:
    time.sleep(3600)
    return ReferenceEngine(config)


def exits_at_step_2(config: SchedulerConfig) -> ReferenceEngine:
    """`os._exit(3)` inside schedule(): no exception, no cleanup; the harness makes it raise (`engines/exits.py`)."""
    return FailingAt(config, 2, lambda: os._exit(3))


def sys_exit_at_step_2(config: SchedulerConfig) -> ReferenceEngine:
    """`sys.exit(0)` inside schedule(): a SystemExit, which a harness that caught only Exception let end the
    run with exit status 0, read by CI as a pass."""
    return FailingAt(config, 2, lambda: sys.exit(0))


def _raise_keyboard_interrupt() -> object:
    raise KeyboardInterrupt


EXIT_ENV = "SCHEDSPEC_TEST_EXIT"  # how `exits_as_told` ends its program: "WAY:METHOD:CALL", or "@FILE" holding it

# The ways an engine can end the program it runs in, as `exits_as_told` names them.
EXITS: dict[str, Callable[[], object]] = {
    "sys_exit_0": lambda: sys.exit(0),
    "sys_exit_1": lambda: sys.exit(1),
    "sys_exit_text": lambda: sys.exit("planted: bye"),
    "os_exit_0": lambda: os._exit(0),
    "os_exit_3": lambda: os._exit(3),
    "keyboard_interrupt": _raise_keyboard_interrupt,
}


class _ExitsAsTold(ReferenceEngine):
    """The reference, until the call `SCHEDSPEC_TEST_EXIT` names, which ends the program the way it names.

    `WAY:METHOD:CALL`: WAY one of `EXITS`, METHOD `factory`, `add_request`,
    `schedule`, `summary` or `update_from_output`, CALL which call of it
    (0: the first) fires. The property tests draw all three: wherever an
    engine ends its program, the run must end in an error, never a pass.
    `@FILE` reads the plan from FILE as each engine is built, so an engine
    host the harness keeps between runs (started under an older plan) takes
    the current one.
    """

    name = "exits-as-told"

    def __init__(self, config: SchedulerConfig) -> None:
        plan = os.environ[EXIT_ENV]
        if plan.startswith("@"):
            with open(plan[1:], encoding="utf-8") as f:
                plan = f.read().strip()
        way, self.method, call = plan.split(":")
        self.exit, self.at_call, self.calls = EXITS[way], int(call), 0
        if self.method == "factory":
            self.exit()
        super().__init__(config)

    def _maybe_exit(self, method: str) -> None:
        if method == self.method:
            if self.calls == self.at_call:
                self.exit()
            self.calls += 1

    def add_request(self, request: Any) -> None:
        self._maybe_exit("add_request")
        super().add_request(request)

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        self._maybe_exit("schedule")
        return super().schedule(throttle_prefills)

    def summary(self) -> StateSummary:
        self._maybe_exit("summary")
        return super().summary()

    def update_from_output(self, output: SchedulerOutput, model_output: ModelRunnerOutput) -> Any:
        self._maybe_exit("update_from_output")
        return super().update_from_output(output, model_output)


def exits_as_told(config: SchedulerConfig) -> ReferenceEngine:
    return _ExitsAsTold(config)


class _Mistyped(ReferenceEngine):
    """Right decisions, one answer of the wrong type: the value a careless engine hands back.

    Each case was seen to get past a harness that judged before it typed:
    a token count or free-block count as a string crashed a monitor deep in
    `spec/invariants/` (exit 1, read as a divergence), and `True` or `1.0`
    compared equal to 1 and passed. The harness must call each `malformed`.
    """

    name = "mistyped"

    def __init__(self, config: SchedulerConfig, field: str, as_type: Callable[[int], Any]) -> None:
        super().__init__(config)
        self.field, self.as_type = field, as_type

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        out = super().schedule(throttle_prefills)
        if self.field == "tokens" and out.num_scheduled_tokens:
            # `True` only where it still equals the count (1), so a harness that compared first would pass it.
            grants = {
                rid: self.as_type(n) if self.as_type is not bool or n == 1 else n
                for rid, n in out.num_scheduled_tokens.items()
            }
            return dataclasses.replace(out, num_scheduled_tokens=grants)
        if self.field == "block_id" and out.scheduled_new_reqs:
            first = out.scheduled_new_reqs[0]
            bad = dataclasses.replace(first, block_ids=(self.as_type(first.block_ids[0]),) + first.block_ids[1:])
            return dataclasses.replace(out, scheduled_new_reqs=(bad,) + out.scheduled_new_reqs[1:])
        return out

    def summary(self) -> StateSummary:
        s = super().summary()
        if self.field == "free_blocks":
            return dataclasses.replace(s, num_free_blocks=self.as_type(s.num_free_blocks))
        return s


def token_count_as_string(config: SchedulerConfig) -> ReferenceEngine:
    return _Mistyped(config, "tokens", str)


def token_count_as_bool(config: SchedulerConfig) -> ReferenceEngine:
    return _Mistyped(config, "tokens", bool)


def token_count_as_float(config: SchedulerConfig) -> ReferenceEngine:
    return _Mistyped(config, "tokens", float)


def free_blocks_as_string(config: SchedulerConfig) -> ReferenceEngine:
    return _Mistyped(config, "free_blocks", str)


def block_id_none(config: SchedulerConfig) -> ReferenceEngine:
    return _Mistyped(config, "block_id", lambda _: None)


class _CoinFlip(ReferenceEngine):
    """The reference, except that now and then it grants one token more: a nondeterministic engine."""

    name = "coin-flip"

    def __init__(self, config: SchedulerConfig) -> None:
        super().__init__(config)
        self._rng = random.Random(os.urandom(8))

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        out = super().schedule(throttle_prefills)
        items = list(out.num_scheduled_tokens.items())
        if items and self._rng.random() < 0.2:
            rid, n = items[-1]
            items[-1] = (rid, n + 1)
            return SchedulerOutput(
                dict(items),
                out.scheduled_new_reqs,
                out.scheduled_cached_reqs,
                out.scheduled_spec_decode_tokens,
                out.preempted_req_ids,
                out.finished_req_ids,
            )
        return out


def coin_flip(config: SchedulerConfig) -> ReferenceEngine:
    return _CoinFlip(config)


class _Mutating(ReferenceEngine):
    """Correct decisions, but it clears the grant dict it returned once the step is absorbed.

    An engine that reuses its output buffers does this. A harness that reads
    the output after `update_from_output` would see empty grants and report
    a divergence the engine never made.
    """

    name = "mutating"

    def update_from_output(self, output: SchedulerOutput, model_output: ModelRunnerOutput) -> Any:
        finished = super().update_from_output(output, model_output)
        if isinstance(self._last, SchedulerOutput):
            self._last.num_scheduled_tokens.clear()  # type: ignore[attr-defined]
        return finished

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        self._last = super().schedule(throttle_prefills)
        return self._last


def mutating(config: SchedulerConfig) -> ReferenceEngine:
    return _Mutating(config)


_made = 0


def every_second_run_differs(config: SchedulerConfig) -> ReferenceEngine:
    """Right on its 1st, 3rd, ... run in a process, one token off on the 2nd, 4th, ...: flaky, but predictably so.

    A random engine shows nondeterminism only by luck; this one shows it to
    the determinism re-run of the very first workload, every time.
    """
    from .planted import PerturbedEngine

    global _made
    _made += 1
    return ReferenceEngine(config) if _made % 2 else PerturbedEngine(config, "tokens", 1)
