"""The behaviour coverage map: which pass-level events a campaign reached, in which mode.

A cell is an event (`EVENTS`, detected in the step records by `events.py`)
in a mode: FCFS or PRIORITY, sync or async scheduling, spec decode on or
off, prefix caching on or off (16 modes). A bug that needs several of them
at once (async, PRIORITY, a running request skipped by the pass and a full
KV pool in one step) hides in a cell no family draws; the map names every
cell, so a certificate can say which it never reached.

Some cells no workload can reach, whatever it draws: `IMPOSSIBLE` lists
them as data, each rule with the modes it covers and the reason (also in
`docs/conformance.md`, and in every certificate). No workload of a bounded
sample (`tests/unit/conformance/campaign/test_coverage_map.py`) or of 6,400 workloads
(`tests/slow/test_coverage_map_long.py`) reaches one of them; the README's
main job, the default campaign, reaches every other cell
(`tests/campaigns/test_certify_torch.py`), which the mixed families
(`families_mixed.py`) are there for.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

from ...spec.config import SchedulerConfig
from ...spec.invariants import Violation, check_trace
from ...spec.invariants.views import StepView
from ...spec.trace import StepRecord, Trace
from ...spec.workload import Workload
from .events import EventTracker, events

EVENTS: dict[str, str] = {
    "skip": "the RUNNING pass passed a running request over (nothing owed below L - 1, or the async max_tokens rule Z2)",
    "preempt": "a running request was preempted to make room for another",
    "self_preempt": "a running request found no room and preempted itself",
    "refund": "PRIORITY: the victim had been granted earlier in the same pass; its grant was undone (Z1)",
    "preempt_skipped": "PRIORITY: the victim was a request the pass had already skipped (the req_index fix, T21)",
    "prepend": "a victim went back into the waiting queue ahead of a request already waiting",
    "length_clamp": "the RUNNING pass's max_model_len bound (L - C - 1) cut a grant below what it was otherwise owed "
    "(to 0 under async: a skip)",
    "threshold_lone": "a lone request (running + waiting = 1) was granted past the configured long-prefill threshold",
    "threshold_adaptive": "the adaptive threshold's fair-share floor let a grant past the configured threshold (T10)",
    "pad": "a decode-like admission was padded to 1 + k with placeholder drafts (T40)",
    "prefix_hit": "an admission started from cached blocks",
    "eviction": "a block handed out evicted the cached prefix it held",
    "stale_output": "a batch queue (async or PP): an absorbed output named a request preempted after that output was "
    "scheduled",
    "abort_running": "an abort finished a running request",
    "abort_waiting": "an abort finished a waiting request that had never run",
    "abort_preempted": "an abort finished a preempted request",
    "abort_finished": "an abort found its request already finished",
    "livelock": "the run repeated its state with requests live until max_steps (D1, the padding livelocks)",
    "stop_eos": "a request finished on EOS",
    "stop_token": "a request finished on a stop token",
    "stop_max_tokens": "a request finished on max_tokens",
    "stop_max_model_len": "a request finished on max_model_len",
    "grammar_wait": "structured output: a request waiting for its grammar was passed over while one behind it was "
    "admitted",
    "grammar_error": "structured output: a grammar that failed to compile finished its request with FINISHED_ERROR",
    "lora_skip": "LoRA: a request whose adapter would exceed max_loras was passed over while one behind it was admitted",
    "decode_cadence": "pipeline parallel: the async decode cadence passed over a running request that decoded fewer "
    "than pp_size schedule() calls ago",
    "prefill_deferred": "the prefill cadence: a step deferred prefills (a DP throttle, or the local interval) and held "
    "back a prompt chunk or a waiting request's prefill",
    "reset_preempted": "a cache reset with reset_running_requests preempted a running request outside schedule()",
    "paused": "a pause held a live request back: PAUSED_NEW a waiting one, PAUSED_ALL any",
    "pooled": "pooling: a request finished on its pooled output",
    "pooled_at_max_model_len": "pooling: a request whose prompt is max_model_len long was pooled (its last chunk "
    "reached L: no slot kept for a sampled token)",
}


@dataclass(frozen=True)
class Mode:
    policy: str  # "fcfs" or "priority"
    async_scheduling: bool
    spec_decode: bool
    prefix_caching: bool

    @property
    def name(self) -> str:
        parts = [self.policy, "async" if self.async_scheduling else "sync"]
        return "-".join(parts + ["spec"] * self.spec_decode + ["caching"] * self.prefix_caching)

    @classmethod
    def of(cls, config: SchedulerConfig) -> Mode:
        return cls(
            config.policy,
            config.async_scheduling,
            config.num_speculative_tokens > 0,
            config.enable_prefix_caching,
        )


MODES: tuple[Mode, ...] = tuple(
    Mode(p, a, s, c) for p, a, s, c in product(("fcfs", "priority"), (False, True), (False, True), (False, True))
)


@dataclass(frozen=True)
class Impossible:
    """No workload reaches `event` in a mode where `where` holds, for `reason`."""

    event: str
    where: Callable[[Mode], bool]
    modes: str  # `where` in words
    reason: str


SYNC_OWES = (
    "a synchronous step absorbs its own output before the next schedule(), so every running request owes at "
    "least one token (a prefill chunk, or the token it just sampled) and has C <= L - 2 (one at L tokens has "
    "finished on max_model_len): the pass grants each request it reaches something"
)
# Pipeline parallel keeps steps in flight in a synchronous engine too (a batch queue of pp_size), so a sync mode
# reaches skips and stale output, except with spec decode, which the spec runs under PP only asynchronously. A
# victim the pass passed over needs no skip in sync spec decode either: the prefill cadence holds prompt chunks.
SYNC_SPEC_HAS_NO_PP = (
    "; and pipeline parallel, whose batch queue keeps a synchronous step in flight, is modelled with spec decode "
    "only under async scheduling (spec/config.py)"
)


def _sync_spec_decode(m: Mode) -> bool:
    return not m.async_scheduling and m.spec_decode


IMPOSSIBLE: tuple[Impossible, ...] = (
    Impossible(
        "refund",
        lambda m: m.policy == "fcfs",
        "FCFS",
        "FCFS preempts running[-1], the tail, which the pass has not reached yet: a victim was never granted",
    ),
    Impossible(
        "preempt_skipped",
        lambda m: m.policy == "fcfs",
        "FCFS",
        "FCFS preempts the tail, never a request behind the one being served",
    ),
    Impossible("skip", _sync_spec_decode, "sync spec decode", SYNC_OWES + SYNC_SPEC_HAS_NO_PP),
    Impossible(
        "length_clamp",
        lambda m: not m.async_scheduling and not m.spec_decode,
        "sync without spec decode",
        "a running request owes T - C tokens with T <= L - 1 (one at L has finished), so L - C - 1 >= the owed "
        "count: the bound can only tie; drafts (spec decode) or placeholders (async) are what carry a request "
        "past it. A pooling model keeps no slot (L - C - 0 >= T - C with T <= L), but before 0.32.0 it kept one: "
        "its prompt of L stalls there, a known violation of those releases (`pooling-samples-no-token`)",
    ),
    Impossible("pad", lambda m: not m.spec_decode, "spec decode off", "padding is to 1 + k drafts; k = 0"),
    Impossible("prefix_hit", lambda m: not m.prefix_caching, "prefix caching off", "nothing is cached"),
    Impossible("eviction", lambda m: not m.prefix_caching, "prefix caching off", "nothing is cached"),
    Impossible(
        "stale_output",
        _sync_spec_decode,
        "sync spec decode",
        "a synchronous step absorbs its own output before anything can be preempted" + SYNC_SPEC_HAS_NO_PP,
    ),
    *(
        Impossible(
            event,
            lambda m: m.spec_decode,
            "spec decode",
            "a pooling model has no drafter: spec decode needs sampled tokens (spec/config.py refuses the pair)",
        )
        for event in ("pooled", "pooled_at_max_model_len")
    ),
    Impossible(
        "decode_cadence",
        lambda m: not m.async_scheduling,
        "sync",
        "only AsyncScheduler sets next_decode_eligible_step (vllm/v1/core/sched/async_scheduler.py)",
    ),
)


def cell(event: str, mode: Mode) -> str:
    return f"{event}@{mode.name}"


def impossible_reason(event: str, mode: Mode) -> str | None:
    """Why no workload reaches this cell; None if one can."""
    reasons = [f"{i.modes}: {i.reason}" for i in IMPOSSIBLE if i.event == event and i.where(mode)]
    return "; ".join(reasons) or None


ALL_CELLS: tuple[str, ...] = tuple(cell(e, m) for e in EVENTS for m in MODES)
POSSIBLE_CELLS: tuple[str, ...] = tuple(cell(e, m) for e in EVENTS for m in MODES if impossible_reason(e, m) is None)


def cells(workload: Workload, records: Iterable[StepRecord]) -> Counter[str]:
    """How often each cell was reached in these records: the events, under the workload's mode."""
    return _as_cells(workload, events(workload, records))


def _as_cells(workload: Workload, seen: Counter[str]) -> Counter[str]:
    mode = Mode.of(workload.config)
    return Counter({cell(e, mode): n for e, n in seen.items() if e in EVENTS})


def judge_and_cells(
    engine_trace: Trace, oracle_records: Sequence[StepRecord], agree: bool
) -> tuple[list[Violation], Counter[str], float]:
    """The monitors' verdict on the engine's trace, the cells the oracle's records reach, and the seconds the
    cells took (a certificate counts them apart from the monitors).

    `agree`: the two runs matched step for step at the `blocks` level, so the engine's records are the
    oracle's, and one replay feeds both the monitors and the event tracker. Otherwise (a divergence, or a
    coarser level) the oracle's records are replayed on their own.
    """
    if not agree:
        violations = check_trace(engine_trace)
        t0 = time.perf_counter()
        reached = cells(engine_trace.workload, oracle_records)
        return violations, reached, time.perf_counter() - t0
    tracker, seen, counting = EventTracker(engine_trace.workload), Counter[str](), 0.0

    def count(view: StepView, rec: StepRecord) -> None:
        nonlocal counting
        t0 = time.perf_counter()
        seen.update(tracker.step(rec, view))
        counting += time.perf_counter() - t0

    violations = check_trace(engine_trace, on_view=count)
    return violations, _as_cells(engine_trace.workload, seen + tracker.finish()), counting


def summary(reached: Mapping[str, int]) -> dict[str, Any]:
    """The certificate's `coverage_map`: every possible cell's count, the ones never reached, and why the others
    are impossible."""
    counts = {c: reached.get(c, 0) for c in POSSIBLE_CELLS}
    missed = [c for c, n in counts.items() if n == 0]
    return {
        "cells_possible": len(POSSIBLE_CELLS),
        "cells_reached": len(POSSIBLE_CELLS) - len(missed),
        "never_reached": missed,
        "counts": counts,
        "cells_impossible": len(ALL_CELLS) - len(POSSIBLE_CELLS),
        "impossible": [{"event": i.event, "modes": i.modes, "reason": i.reason} for i in IMPOSSIBLE],
    }


def _short(mode: Mode) -> str:
    return f"{mode.policy[0].upper()}{'a' if mode.async_scheduling else 's'}{'k' * mode.spec_decode}{'c' * mode.prefix_caching}"


def markdown_lines(cmap: Mapping[str, Any]) -> list[str]:
    """The map as a table, events by modes, and the possible cells never reached, by name."""
    counts = cmap["counts"]
    lines = [
        f"## Coverage map: {cmap['cells_reached']} of {cmap['cells_possible']} possible cells reached",
        "",
        "Modes: F/P = FCFS/PRIORITY, s/a = sync/async, k = spec decode on, c = prefix caching on. "
        f"`-`: impossible ({cmap['cells_impossible']} cells; why: `coverage_map.IMPOSSIBLE`, docs/conformance.md); "
        "**0**: possible, never reached.",
        "",
        "| event | " + " | ".join(_short(m) for m in MODES) + " |",
        "|---|" + "---:|" * len(MODES),
    ]
    for e in EVENTS:
        row = []
        for m in MODES:
            c = cell(e, m)
            row.append("-" if c not in counts else "**0**" if counts[c] == 0 else str(counts[c]))
        lines.append(f"| {e} | " + " | ".join(row) + " |")
    missed: dict[str, list[str]] = {}
    for c in cmap["never_reached"]:
        event, mode = c.split("@")
        missed.setdefault(event, []).append(mode)
    if missed:
        lines += ["", f"Never reached ({len(cmap['never_reached'])} cells):", ""]
        for event, modes in missed.items():
            everywhere = len(modes) == sum(1 for m in MODES if impossible_reason(event, m) is None)
            lines.append(f"- {event}: {'every mode it is possible in' if everywhere else ', '.join(modes)}")
    return lines
