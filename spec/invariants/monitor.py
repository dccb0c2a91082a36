"""Runtime monitors: every invariant, at every step of any engine's trace.

Step invariants come from the catalogue (`catalogue.INVARIANTS`: the bounds,
dual-use with Z3) and from the decision invariants (`decisions.DECISIONS`:
each decision is the one the rules make at its turn, monitor-only); the
monitors run both, `decisions.MONITORED`. A few properties span the whole
trace and are checked here on the step records themselves:

* `finished-reported-once`: every finished request's id appears in exactly
  one later `finished_req_ids`, and never before it finished (I-18);
* `stop-is-final`: a finished request's outputs end at its first EOS or stop
  token and not after it, and stay within max_tokens and max_model_len
  (STOP, MAXTOK). That the stop token wins over a length cap on the same
  token is the catalogue's `stop-token-finishes`, checked per step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ..config import SchedulerConfig
from ..request import Request
from ..trace import StepRecord, Trace
from ..versions import holds, known_violation
from ..workload import Workload
from .catalogue import Invariant, budget_detail
from .decisions import DECISION_NAMES, MONITORED, decision_detail
from .replay import TraceReplay
from .views import StepView


@dataclass(frozen=True)
class Violation:
    invariant: str
    step: int
    detail: str
    known: str = ""  # why the trace's release breaks it (`spec.versions.KNOWN_VIOLATIONS`); "" for a real one

    def __str__(self) -> str:
        known = f" (known violation of this release: {self.known})" if self.known else ""
        return f"step {self.step}: {self.invariant}: {self.detail}{known}"


def _names(invariants: Iterable[Invariant] | None) -> tuple[Invariant, ...]:
    return tuple(invariants) if invariants is not None else MONITORED


def check_trace(
    trace: Trace,
    invariants: Iterable[Invariant] | None = None,
    history: bool = True,
    on_step: Callable[[int], None] | None = None,
    on_view: Callable[[StepView, StepRecord], None] | None = None,
) -> list[Violation]:
    """Every violation, in step order (at most one per invariant: the first). `on_step(i)`: the i-th step is done.

    One pass over `trace.steps`, so they may be a stream (`trace_stream.StreamedTrace`). `on_view` gets each
    step's view as well: a caller that also needs the views (the coverage map's event tracker) shares this
    replay instead of running its own, which costs as much as the monitors.
    """
    replay, monitor = TraceReplay(trace), Monitor(trace.workload, invariants, history)
    for i, rec in enumerate(trace.steps):
        view = replay.step(rec)
        monitor.step(view, rec)
        if on_view is not None:
            on_view(view, rec)
        if on_step is not None:
            on_step(i)
    return mark_known(monitor.finish(trace.end), trace.workload.config)


def mark_known(violations: list[Violation], config: SchedulerConfig) -> list[Violation]:
    """Each violation the config's release is known to commit, marked with why (`spec.versions.known_violation`)."""
    out = []
    for v in violations:
        k = known_violation(v.invariant, config.vllm_version, config.runner)
        out.append(dataclasses.replace(v, known=k.why) if k is not None else v)
    return out


def real_violations(violations: Iterable[Violation]) -> list[Violation]:
    return [v for v in violations if not v.known]


class Monitor:
    """`check_trace` a step at a time, for a caller that replays the trace itself (`onepass.check_all`).

    It keeps the first violation of each check and the history's per-request
    bookkeeping: O(requests), nothing per step.
    """

    def __init__(self, workload: Workload, invariants: Iterable[Invariant] | None = None, history: bool = True) -> None:
        self.invariants = _names(invariants)
        self.found: dict[str, Violation] = {}
        self.history = History(workload) if history else None
        self.history_found: dict[str, Violation] = {}

    def step(self, view: StepView, rec: StepRecord) -> None:
        for inv in self.invariants:
            if inv.name not in self.found and not inv.holds(view):
                detail = problem_detail(inv.name, view) or inv.sentence
                self.found[inv.name] = Violation(inv.name, rec.step, detail)
        if self.history is not None:
            for v in self.history.step(rec):
                self.history_found.setdefault(v.invariant, v)

    def finish(self, end: str) -> list[Violation]:
        """The violations, as `check_trace` orders them: the history's after the step invariants', then by step."""
        found = dict(self.found)
        history = dict(self.history_found)
        if self.history is not None:
            for v in self.history.finish(end):
                history.setdefault(v.invariant, v)
        for v in history.values():
            found.setdefault(v.invariant, v)
        return sorted(found.values(), key=lambda v: v.step)


def problem_detail(name: str, view: StepView) -> str:
    """The concrete problem behind a violated id-level or budget invariant, which says more than its sentence."""
    if name == "budget-conservation":
        return budget_detail(view)
    if name in DECISION_NAMES:
        return decision_detail(name, view)
    problems = {
        "block-conservation": view.ids_problem,
        "refcounts-match-tables": view.refs_problem,
        "cached-blocks-match-tokens": view.cache_problem,
    }
    return problems.get(name, "")


def first_violation(trace: Trace, invariants: Iterable[Invariant] | None = None) -> Violation | None:
    violations = check_trace(trace, invariants)
    return violations[0] if violations else None


def trace_violations(trace: Trace) -> list[Violation]:
    """Only the checks that span the whole trace (`finished-reported-once`, `stop-is-final`)."""
    return list(_history(trace))


def _history(trace: Trace) -> Iterable[Violation]:
    history = History(trace.workload)
    for rec in trace.steps:
        yield from history.step(rec)
    yield from history.finish(trace.end)


class History:
    """The checks that span the trace, fed a step at a time; what it keeps is per request, not per step."""

    def __init__(self, workload: Workload) -> None:
        self.requests = {r.request_id: r.request for r in workload.requests}
        self.L = workload.config.max_model_len
        self.release = workload.config.vllm_version
        self.finished_at: dict[str, int] = {}
        self.reported: dict[str, int] = {}

    def step(self, rec: StepRecord) -> Iterator[Violation]:
        finished_at, reported = self.finished_at, self.reported
        # Aborted before schedule(), so reported by this very step; one aborted mid-step is reported by the next.
        for rid in rec.aborted:
            if rid in rec.finished:
                finished_at[rid] = rec.step
        for rid in sorted(rec.output.finished_req_ids):  # a frozenset: its order would hang on the hash seed
            if rid in reported:
                yield Violation(
                    "finished-reported-once", rec.step, f"{rid} reported again (first at step {reported[rid]})"
                )
            elif rid not in finished_at:
                yield Violation("finished-reported-once", rec.step, f"{rid} reported before it finished")
            reported[rid] = rec.step
        for rid, f in rec.finished.items():
            finished_at[rid] = rec.step
            yield from _stop_is_final(rec.step, rid, self.requests[rid], f.output_token_ids, self.L, self.release)

    def finish(self, end: str) -> Iterator[Violation]:
        if end == "drained":
            for rid, step in self.finished_at.items():
                if rid not in self.reported:
                    yield Violation("finished-reported-once", step, f"{rid} finished but was never reported")


def _stop_is_final(
    step: int, rid: str, request: Request, outputs: tuple[int, ...], L: int, release: str
) -> Iterable[Violation]:
    """No output after the first EOS or stop token (before 0.29.0, the first at or past min_tokens), and none beyond
    the length caps. Stated on its own, not through `rules.stop_kind`, whose order it checks."""
    stops = set(request.stop_token_ids) | ({request.effective_eos_token_id} - {None})
    first = 0 if holds("min-tokens-gates-every-stop", release) else max(request.min_tokens - 1, 0)
    early = [i for i, t in enumerate(outputs[:-1]) if t in stops and i >= first]
    if early:
        yield Violation(
            "stop-is-final", step, f"{rid} emitted {len(outputs) - early[0] - 1} tokens after its stop token"
        )
    if len(outputs) > request.max_tokens or request.num_prompt_tokens + len(outputs) > L:
        yield Violation(
            "stop-is-final", step, f"{rid} ended with {len(outputs)} outputs, beyond max_tokens or max_model_len"
        )
