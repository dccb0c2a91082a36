"""The consistency rules and the monitors in one pass over a trace's steps, sharing one replay.

`schedspec check` used to run `check_consistency` and then `check_trace`,
each with its own `TraceReplay`, over a trace held whole in memory. Here
each step is read once, replayed once, and its view handed to both, so the
steps can come straight from the file (`trace_stream.StreamedTrace`) and
what is held between steps is what the checkers keep: per live request
(the replay's block tables, drafts and counters, the records still in
flight) or per request of the workload (arrival ranks, who finished and
was reported when, when each was last preempted), never per step.

The results are those of the two functions run apart, violation for
violation and in the same order: they run the same code
(`consistency.Consistency`, `monitor.Monitor`), and a replay is a function
of the records it has been fed, so one shared replay gives both the same
views as two would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .consistency import Consistency
from .monitor import Monitor, Violation, mark_known
from .replay import TraceReplay


@dataclass(frozen=True)
class Checked:
    inconsistent: list[Violation]  # `check_consistency`'s
    violations: list[Violation]  # `check_trace`'s
    num_steps: int


def check_all(trace: Any, on_step: Callable[[int], None] | None = None) -> Checked:
    """`check_consistency(trace)` and `check_trace(trace)` from one pass over `trace.steps`.

    `trace` is a `Trace` or a `StreamedTrace`: anything with `workload`,
    `end` and iterable `steps`. `on_step(i)`: the i-th step is checked.
    """
    replay = TraceReplay(trace)
    consistency, monitor = Consistency(trace.workload, replay), Monitor(trace.workload)
    for i, rec in enumerate(trace.steps):
        monitor.step(consistency.step(rec), rec)
        if on_step is not None:
            on_step(i)
    violations = mark_known(monitor.finish(trace.end), trace.workload.config)
    return Checked(consistency.finish(trace.end), violations, consistency.num_steps)
