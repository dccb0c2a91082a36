"""Shrinking a failing workload to a minimal one that still fails.

Hypothesis shrinks what Hypothesis generated; a divergence found by a seeded
campaign, or handed in as a file, has no Hypothesis choice sequence behind
it, so it is shrunk here by greedy delta debugging over the workload's own
structure. The passes go from coarse to fine, and every accepted step makes
the workload strictly smaller in this order: fewer requests, fewer aborts,
shorter prompts, fewer output tokens, earlier arrivals, fewer steps. Every
candidate is valid by construction (prompts only get shorter, `min_tokens`
follows `max_tokens` down, aborts follow their requests out). The
predicate is re-run on each candidate, so the result is guaranteed to fail
in the same way (the caller decides what "the same way" means).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from ...spec.workload import Workload, WorkloadRequest


def size(w: Workload) -> tuple[int, ...]:
    return (
        len(w.requests),
        len(w.aborts),
        sum(r.request.num_prompt_tokens for r in w.requests),
        sum(r.request.max_tokens for r in w.requests),
        sum(r.arrival_step for r in w.requests),
        w.max_steps,
    )


def _with_requests(w: Workload, requests: list[WorkloadRequest]) -> Workload:
    keep = {r.request_id for r in requests}
    return w.replace(requests=tuple(requests), aborts=tuple(a for a in w.aborts if a.request_id in keep))


def _shorter(n: int, floor: int) -> list[int]:
    return sorted({v for v in (floor, n // 2, n - 1) if floor <= v < n})


def _candidates(w: Workload) -> Iterator[Workload]:
    reqs = list(w.requests)
    # Fewer requests: halves first, then one at a time.
    for chunk in (len(reqs) // 2, 1):
        if chunk < 1:
            continue
        for start in range(0, len(reqs), chunk):
            rest = reqs[:start] + reqs[start + chunk :]
            if rest:
                yield _with_requests(w, rest)
    for i in range(len(w.aborts)):
        yield w.replace(aborts=w.aborts[:i] + w.aborts[i + 1 :])
    for i, r in enumerate(reqs):
        q = r.request
        for n in _shorter(q.num_prompt_tokens, 1):
            yield _with_requests(
                w, reqs[:i] + [replace(r, request=replace(q, prompt_token_ids=q.prompt_token_ids[:n]))] + reqs[i + 1 :]
            )
        for m in _shorter(q.max_tokens, 1):
            shorter = replace(
                r,
                request=replace(q, max_tokens=m, min_tokens=min(q.min_tokens, m)),
                output_token_ids=r.output_token_ids[:m],
            )
            yield _with_requests(w, reqs[:i] + [shorter] + reqs[i + 1 :])
        for s in _shorter(r.arrival_step, 0):
            yield _with_requests(w, reqs[:i] + [replace(r, arrival_step=s)] + reqs[i + 1 :])
    for s in _shorter(w.max_steps, 1):
        yield w.replace(max_steps=s)


def shrink(
    workload: Workload,
    still_fails: Callable[[Workload], bool],
    time_budget_s: float = 120.0,
    max_calls: int = 2000,
) -> tuple[Workload, int]:
    """The smallest workload reached that still fails, and how many candidates were tried.

    `max_calls` is the budget. `time_budget_s` is only a safety cap: the
    result of a shrink is a smaller witness, never a verdict, so stopping
    early costs size, not truth.
    """
    best, calls = workload, 0
    deadline = time.monotonic() + time_budget_s
    improved = True
    while improved and calls < max_calls and time.monotonic() < deadline:
        improved = False
        for candidate in _candidates(best):
            if calls >= max_calls or time.monotonic() >= deadline:
                break
            if size(candidate) >= size(best):
                continue
            calls += 1
            if still_fails(candidate):
                best, improved = candidate, True
                break
    return best, calls
