"""The lock-step differ: one workload, two engines, stop at the first divergence.

Both engines are driven by the same loop (`spec.engine.steps`), one step at
a time, and their step records are compared at the chosen level before
either takes another step. Stopping early matters: an engine that diverged
tends to crash or livelock a few steps later, and the first difference is
the one that explains the rest.

A run ends in one of three ways, never confused:

* **matched**: both ran to the end and agree;
* **diverged**: a field differs, or an engine *raised* (a crash of the
  scheduler is a finding about it: `Divergence.crash`, which
  `--allow-divergence` never forgives);
* **error** (`EngineError`): an engine could not start, its process died,
  it hung past the step deadline, or it answered something malformed.
  That says nothing about the scheduler, so it is never shrunk and never a
  counterexample. It names the engine at fault, never the oracle for it.

A start-up failure is retried once: on a loaded machine a driver that
missed its start deadline usually makes it the second time.
"""

from __future__ import annotations

import signal
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ...spec.engine import EngineFactory, steps
from ...spec.errors import InfrastructureError
from ...spec.trace import StateSummary, StepRecord
from ...spec.workload import Workload
from ..engines.exits import EngineExited, engine_may_not_exit, exit_cause
from .compare import Difference, first_difference

DEFAULT_STEP_TIMEOUT_S = 30.0
DEFAULT_START_TIMEOUT_S = 300.0


class EngineFailure(Exception):
    """An in-process engine missed its deadline (the harness's alarm)."""


FIXES = {
    "start": "check that the factory takes one SchedulerConfig and returns an engine "
    "(docs/engines.md); if the machine is loaded, raise --start-timeout",
    "died": "the engine's process exited: run the workload alone (`schedspec replay` or the engine under a debugger) "
    "and read its stderr",
    "timeout": "a call took longer than --step-timeout: the engine hangs, or the machine is overloaded; "
    "raise --step-timeout to tell which",
    "malformed": "return the spec's types (spec/output.py SchedulerOutput, spec/trace.py StateSummary and "
    "FinishedRequest); see docs/engines.md",
}


@dataclass(frozen=True)
class EngineError:
    """An engine failed as a program, not as a scheduler: the third outcome of a workload."""

    side: str  # "a" (the oracle) or "b" (the engine under test)
    engine: str
    kind: str  # start | died | timeout | malformed
    step: int | None  # None: before the first step
    cause: str

    @property
    def fix(self) -> str:
        return FIXES[self.kind]

    def to_json(self) -> dict[str, Any]:
        return {
            "side": self.side,
            "engine": self.engine,
            "kind": self.kind,
            "step": self.step,
            "cause": self.cause,
            "fix": self.fix,
        }

    def __str__(self) -> str:
        where = "at start" if self.step is None else f"at step {self.step}"
        return f"engine {self.engine!r} ({self.side}) {self.kind} {where}: {self.cause}"


@dataclass(frozen=True)
class Divergence:
    step: int
    field: str
    a: Any
    b: Any
    state_before: StateSummary | None  # None at step 0: the empty initial state
    records: tuple[StepRecord | None, StepRecord | None] = (None, None)

    @property
    def crash(self) -> bool:
        """An engine raised: a finding, but one no `--allow-divergence` forgives."""
        return self.field in ("engine a", "engine b")

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "field": self.field,
            "a": self.a,
            "b": self.b,
            "state_before": None if self.state_before is None else self.state_before.to_json(),
        }

    def same_as(self, other: Divergence | None) -> bool:
        """The same finding again: what replaying a counterexample must give."""
        return other is not None and (self.step, self.field, self.a, self.b) == (
            other.step,
            other.field,
            other.a,
            other.b,
        )


@dataclass
class DiffResult:
    divergence: Divergence | None
    steps_compared: int
    records_a: list[StepRecord] = field(default_factory=list)
    records_b: list[StepRecord] = field(default_factory=list)
    error: EngineError | None = None
    # Seconds spent in each part: engine "a" and engine "b" (starting and stepping), and "compare" (the differ):
    # the certificate's share of time per part (certify.time_shares).
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    @property
    def outcome(self) -> str:
        return "error" if self.error else "diverged" if self.divergence else "matched"


@contextmanager
def step_timeout(seconds: float | None, what: str) -> Iterator[None]:
    """Interrupt an in-process engine that hangs; SIGALRM only works in the main thread."""
    if not seconds or signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, signal.SIG_IGN, None):
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise EngineFailure(f"{what} timed out after {seconds:g} s")

    try:
        old = signal.signal(signal.SIGALRM, on_alarm)
    except ValueError:  # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class StepFailed(Exception):
    def __init__(self, kind: str, cause: str) -> None:
        super().__init__(cause)
        self.kind, self.cause = kind, cause


def _call(fn: Callable[[], Any], what: str, timeout: float | None) -> Any:
    """Run one engine call under its deadline; a missed deadline or a broken process becomes `StepFailed`."""
    # The guard goes on before the `try`: a ^C that lands before its SIGINT handler is in place
    # propagates from here, and one after it is noted, so none is mistaken for the engine's own.
    with engine_may_not_exit():
        try:
            with step_timeout(timeout, what):
                return fn()
        except EngineFailure as e:
            raise StepFailed("timeout", str(e)) from None
        except InfrastructureError as e:
            raise StepFailed(e.kind, f"{e.where}: {e.why}") from None
        except (SystemExit, EngineExited, KeyboardInterrupt) as e:
            # An engine ending the program is an engine that died, never the run's own exit; a real ^C goes on.
            cause = exit_cause(e)
            if cause is None:
                raise
            raise StepFailed("died", f"{what}: {cause}") from None


def next_record(it: Iterator[StepRecord], name: str, step: int, timeout: float | None) -> StepRecord | None:
    """The engine's next step record, None once its run has ended."""
    try:
        return _call(lambda: next(it, None), f"engine {name!r} at step {step}", timeout)
    except StepFailed:
        raise
    except Exception as e:  # noqa: BLE001 - any engine error is a finding, not a harness crash
        raise EngineCrash(f"engine {name!r} raised {_one_line(e)} at step {step}") from e


def _one_line(e: BaseException) -> str:
    """`Type: first line`; an exception relayed from an engine's own process already reads so."""
    from ..engines.isolated import EngineRaised

    if isinstance(e, EngineRaised):
        return str(e)
    first = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


class EngineCrash(Exception):
    """An engine raised inside a step: the scheduler crashed."""


def start_engine(make: EngineFactory, config: Any, name: str, timeout: float | None) -> Any:
    """Build an engine under the start deadline, once more if the first try failed; `StepFailed("start")` otherwise."""
    from ..engines.snapshot import check_engine

    cause = ""
    for attempt in (1, 2):
        try:
            engine = _call(lambda: make(config), f"engine {name!r} start", timeout)
            return check_engine(engine, f"engine {name!r} factory")
        except StepFailed as e:
            cause = e.cause
        except InfrastructureError as e:
            cause = f"{e.where}: {e.why}"
        except Exception as e:  # noqa: BLE001 - a factory that raises, or has the wrong signature
            cause = f"the factory raised {_one_line(e)}"
        if attempt == 1:
            cause_1 = cause
    raise StepFailed("start", cause if cause == cause_1 else f"{cause_1}; retried: {cause}")


def diff(
    workload: Workload,
    make_a: EngineFactory | None,
    make_b: EngineFactory,
    level: str = "blocks",
    timeout: float | None = DEFAULT_STEP_TIMEOUT_S,
    keep_records: bool = False,
    start_timeout: float | None = DEFAULT_START_TIMEOUT_S,
    names: tuple[str, str] = ("a", "b"),
) -> DiffResult:
    """Run `workload` on both engines in lock-step; `names` label them in errors (the specs the user typed).

    With `make_a=None`, engine b runs alone, through the same deadlines and
    error handling, and its records land in both lists: a solo run needs no
    second engine (a second vLLM driver costs seconds to start).
    """
    engines: list[Any] = []
    result = DiffResult(None, 0)
    sides = [("a", make_a, names[0]), ("b", make_b, names[1])] if make_a is not None else [("b", make_b, names[1])]
    try:
        for side, make, name in sides:
            t0 = time.perf_counter()
            try:
                engines.append(start_engine(make, workload.config, name, start_timeout))
            except StepFailed as e:
                result.error = EngineError(side, name, "start", None, e.cause)
                return result
            finally:
                result.seconds[side] += time.perf_counter() - t0
        runs = [(side, engine, steps(engine, workload), name) for (side, _, name), engine in zip(sides, engines)]
        before: StateSummary | None = None
        step = 0
        while True:
            records: list[StepRecord | None] = []
            for side, engine, it, name in runs:
                t0 = time.perf_counter()
                try:
                    records.append(next_record(it, getattr(engine, "name", name), step, timeout))
                except StepFailed as e:
                    result.error = EngineError(side, name, e.kind, step, e.cause)
                    return result
                except EngineCrash as e:
                    crash_a, crash_b = (str(e), None) if side == "a" else (None, str(e))
                    result.divergence = Divergence(
                        step, f"engine {side}", crash_a, crash_b, before, (records[0] if records else None, None)
                    )
                    return result
                finally:
                    result.seconds[side] += time.perf_counter() - t0
            ra, rb = records if len(records) == 2 else (records[0], records[0])
            if ra is None or rb is None:
                if ra is not rb:
                    result.divergence = Divergence(
                        step,
                        "trace length",
                        "ended" if ra is None else "continues",
                        "ended" if rb is None else "continues",
                        before,
                        (ra, rb),
                    )
                return result
            t0 = time.perf_counter()
            try:
                d = first_difference(ra, rb, level)
            except Exception as e:  # noqa: BLE001 - a record that cannot even be read is malformed
                result.error = EngineError(
                    "b", names[1], "malformed", step, f"the step record cannot be compared: {type(e).__name__}: {e}"
                )
                return result
            finally:
                result.seconds["compare"] += time.perf_counter() - t0
            result.steps_compared += 1
            if keep_records:
                result.records_a.append(ra)
                result.records_b.append(rb)
            if d is not None:
                result.divergence = Divergence(step, d.field, d.a, d.b, before, (ra, rb))
                return result
            before = ra.state
            step += 1
    finally:
        for started in engines:  # not `e`, which names an exception above
            close = getattr(started, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001 - closing a broken engine must not mask the finding
                    pass


def compare_records(a: Sequence[StepRecord], b: Sequence[StepRecord], level: str) -> tuple[Divergence | None, int]:
    """The lock-step differ's verdict on two finished traces: first divergence and steps compared.

    Used where the two runs did not happen side by side: a batch of torch
    instances against the oracle, or an engine's second run against its first.
    """
    before = None
    for step in range(max(len(a), len(b))):
        ra = a[step] if step < len(a) else None
        rb = b[step] if step < len(b) else None
        if ra is None or rb is None:
            return Divergence(
                step,
                "trace length",
                "ended" if ra is None else "continues",
                "ended" if rb is None else "continues",
                before,
                (ra, rb),
            ), step
        try:
            d = first_difference(ra, rb, level)
        except Exception as e:  # noqa: BLE001 - a record that cannot be read is malformed, as in differ.diff
            return Divergence(step, "malformed step record", None, f"{type(e).__name__}: {e}", before, (ra, rb)), step
        if d is None and ra.model_output != rb.model_output:
            # In lock-step the harness's fake model answers both engines; in a batch the engine's own
            # tensor version of it does, so its answers are part of what must agree.
            d = Difference("model_output", ra.model_output.to_json(), rb.model_output.to_json())
        if d is not None:
            return Divergence(step, d.field, d.a, d.b, before, (ra, rb)), step + 1
        before = ra.state
    return None, len(a)
