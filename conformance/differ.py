"""The lock-step differ: one workload, two engines, stop at the first divergence.

Both engines are driven by the same loop (`spec.engine.steps`), one step at
a time, and their step records are compared at the chosen level before
either takes another step. Stopping early matters: an engine that diverged
tends to crash or livelock a few steps later, and the first difference is
the one that explains the rest.

An engine that raises, hangs past the per-step timeout, or hands back
malformed output is itself a divergence, reported at its step, never a crash
of the harness.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from ..spec.engine import Engine, EngineFactory, steps
from ..spec.trace import StateSummary, StepRecord
from ..spec.workload import Workload
from .compare import first_difference

DEFAULT_STEP_TIMEOUT_S = 30.0


class EngineFailure(Exception):
    """An engine raised, hung or returned something malformed."""


@dataclass(frozen=True)
class Divergence:
    step: int
    field: str
    a: Any
    b: Any
    state_before: StateSummary | None  # None at step 0: the empty initial state
    records: tuple[StepRecord | None, StepRecord | None] = (None, None)

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "field": self.field,
            "a": self.a,
            "b": self.b,
            "state_before": None if self.state_before is None else self.state_before.to_json(),
        }


@dataclass
class DiffResult:
    divergence: Divergence | None
    steps_compared: int
    records_a: list[StepRecord] = field(default_factory=list)
    records_b: list[StepRecord] = field(default_factory=list)


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


def _next(it: Iterator[StepRecord], name: str, step: int, timeout: float | None) -> StepRecord | None:
    try:
        with step_timeout(timeout, f"engine {name!r} at step {step}"):
            return next(it)
    except StopIteration:
        return None
    except EngineFailure:
        raise
    except Exception as e:  # noqa: BLE001 - any engine error is a finding, not a harness crash
        msg = str(e).splitlines()[0] if str(e) else ""
        raise EngineFailure(f"engine {name!r} raised {type(e).__name__} at step {step}: {msg}") from e


def diff(
    workload: Workload,
    make_a: EngineFactory,
    make_b: EngineFactory,
    level: str = "blocks",
    timeout: float | None = DEFAULT_STEP_TIMEOUT_S,
    keep_records: bool = False,
) -> DiffResult:
    engines: list[Engine] = []
    try:
        try:
            engines = [make_a(workload.config), make_b(workload.config)]
        except Exception as e:  # noqa: BLE001
            which = "a" if not engines else "b"
            return DiffResult(Divergence(0, f"engine {which} start", None, f"{type(e).__name__}: {e}", None), 0)
        a, b = engines
        it_a, it_b = steps(a, workload), steps(b, workload)
        before: StateSummary | None = None
        result = DiffResult(None, 0)
        step = 0
        while True:
            try:
                ra = _next(it_a, a.name, step, timeout)
            except EngineFailure as e:
                result.divergence = Divergence(step, "engine a", str(e), None, before)
                return result
            try:
                rb = _next(it_b, b.name, step, timeout)
            except EngineFailure as e:
                result.divergence = Divergence(step, "engine b", None, str(e), before, (ra, None))
                return result
            if ra is None or rb is None:
                if ra is not rb:
                    result.divergence = Divergence(step, "trace length", "ended" if ra is None else "continues",
                                                   "ended" if rb is None else "continues", before, (ra, rb))
                return result
            try:
                d = first_difference(ra, rb, level)
            except Exception as e:  # noqa: BLE001 - a record that cannot even be read is malformed
                result.divergence = Divergence(step, "malformed step record", None, f"{type(e).__name__}: {e}", before, (ra, rb))
                return result
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
        for e in engines:
            close = getattr(e, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001 - closing a broken engine must not mask the finding
                    pass
