"""Runtime monitors: every invariant, at every step of any engine's trace.

Step invariants come from the catalogue. A few properties span the whole
trace and are checked here on the step records themselves:

* `finished-reported-once`: every finished request's id appears in exactly
  one later `finished_req_ids`, and never before it finished (I-18);
* `stop-is-final`: a finished request's outputs end at its first EOS or stop
  token and not after it, and stay within max_tokens and max_model_len
  (STOP, MAXTOK). That the stop token wins over a length cap on the same
  token is the catalogue's `stop-token-finishes`, checked per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ..request import RequestStatus
from ..trace import Trace
from .build import views_from_trace
from .catalogue import INVARIANTS, Invariant, budget_detail


@dataclass(frozen=True)
class Violation:
    invariant: str
    step: int
    detail: str

    def __str__(self) -> str:
        return f"step {self.step}: {self.invariant}: {self.detail}"


def _names(invariants: Iterable[Invariant] | None) -> tuple[Invariant, ...]:
    return tuple(invariants) if invariants is not None else INVARIANTS


def check_trace(trace: Trace, invariants: Iterable[Invariant] | None = None, history: bool = True,
                on_step: Callable[[int], None] | None = None) -> list[Violation]:
    """Every violation, in step order (at most one per invariant: the first). `on_step(i)`: the i-th step is done."""
    found: dict[str, Violation] = {}
    for i, (view, rec) in enumerate(zip(views_from_trace(trace), trace.steps)):
        for inv in _names(invariants):
            if inv.name not in found and not inv.holds(view):
                detail = problem_detail(inv.name, view) or inv.sentence
                found[inv.name] = Violation(inv.name, rec.step, detail)
        if on_step is not None:
            on_step(i)
    if history:
        for v in _history(trace):
            found.setdefault(v.invariant, v)
    return sorted(found.values(), key=lambda v: v.step)


def problem_detail(name: str, view) -> str:
    """The concrete problem behind a violated id-level or budget invariant, which says more than its sentence."""
    if name == "budget-conservation":
        return budget_detail(view)
    return {"block-conservation": view.ids_problem, "refcounts-match-tables": view.refs_problem,
            "cached-blocks-match-tokens": view.cache_problem}.get(name, "")


def first_violation(trace: Trace, invariants: Iterable[Invariant] | None = None) -> Violation | None:
    violations = check_trace(trace, invariants)
    return violations[0] if violations else None


def trace_violations(trace: Trace) -> list[Violation]:
    """Only the checks that span the whole trace (`finished-reported-once`, `stop-is-final`)."""
    return list(_history(trace))


def _history(trace: Trace) -> Iterable[Violation]:
    requests = {r.request_id: r.request for r in trace.workload.requests}
    L = trace.workload.config.max_model_len
    finished_at: dict[str, int] = {}
    reported: dict[str, int] = {}
    for rec in trace.steps:
        for rid in rec.aborted:  # aborted before schedule(), so reported by this very step
            if rid in rec.finished:
                finished_at[rid] = rec.step
        for rid in rec.output.finished_req_ids:
            if rid in reported:
                yield Violation("finished-reported-once", rec.step, f"{rid} reported again (first at step {reported[rid]})")
            elif rid not in finished_at:
                yield Violation("finished-reported-once", rec.step, f"{rid} reported before it finished")
            reported[rid] = rec.step
        for rid, f in rec.finished.items():
            finished_at[rid] = rec.step
            yield from _stop_is_final(rec.step, rid, requests[rid], f.status, f.output_token_ids, L)
    if trace.end == "drained":
        for rid, step in finished_at.items():
            if rid not in reported:
                yield Violation("finished-reported-once", step, f"{rid} finished but was never reported")


def _stop_is_final(step: int, rid: str, request, status: RequestStatus, outputs: tuple[int, ...], L: int) -> Iterable[Violation]:
    stops = set(request.stop_token_ids) | ({request.effective_eos_token_id} - {None})
    early = [i for i, t in enumerate(outputs[:-1]) if t in stops]
    if early:
        yield Violation("stop-is-final", step, f"{rid} emitted {len(outputs) - early[0] - 1} tokens after its stop token")
    if len(outputs) > request.max_tokens or request.num_prompt_tokens + len(outputs) > L:
        yield Violation("stop-is-final", step, f"{rid} ended with {len(outputs)} outputs, beyond max_tokens or max_model_len")
