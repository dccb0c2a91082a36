"""The per-step table `schedspec simulate` prints.

Quiet steps (pure decode, nothing admitted, preempted or finished) are folded
into one line per run of them, so a 1000-step trace still reads as its events.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .spec.trace import Trace
from .steps import StepView, views

MAX_LISTED = 4


def _ids(ids: tuple[str, ...]) -> str:
    if len(ids) <= MAX_LISTED:
        return " ".join(ids)
    return " ".join(ids[:MAX_LISTED]) + f" +{len(ids) - MAX_LISTED}"


def _chunks(chunks: tuple[tuple[str, int], ...]) -> str:
    shown = " ".join(f"{rid}:{n}" for rid, n in chunks[:MAX_LISTED])
    return shown + (f" +{len(chunks) - MAX_LISTED}" if len(chunks) > MAX_LISTED else "")


def _quiet(v: StepView, prev: StepView | None) -> bool:
    return (prev is not None and not (v.prefill_chunks or v.new or v.resumed or v.preempted or v.finished)
            and (v.decode_reqs, v.running, v.waiting) == (prev.decode_reqs, prev.running, prev.waiting))


def step_table(trace: Trace) -> Table:
    w = trace.workload
    table = Table(title=f"{w.name or 'workload'}: {len(trace.steps)} steps, budget {w.config.token_budget}, "
                        f"{w.config.num_usable_blocks} usable blocks, {w.config.policy}",
                  caption=f"engine: {trace.engine}; end: {trace.end}")
    for col, justify in [("step", "right"), ("tokens", "right"), ("decodes", "right"), ("prefill chunks", "left"),
                         ("admitted (*resumed)", "left"), ("preempted", "left"), ("finished", "left"),
                         ("run", "right"), ("wait", "right"), ("free blk", "right")]:
        wraps = col in ("prefill chunks", "admitted (*resumed)", "finished")
        table.add_column(col, justify=justify, no_wrap=not wraps, min_width=16 if wraps else None)
    prev: StepView | None = None
    folded: list[StepView] = []

    def flush() -> None:
        if folded:
            a, b = folded[0], folded[-1]
            table.add_row(f"{a.step}-{b.step}" if a is not b else str(a.step), str(a.total), str(a.decode_reqs),
                          "", "", "", "", str(b.running), str(b.waiting), str(b.free_blocks), style="dim")
            folded.clear()

    for v in views(trace):
        if _quiet(v, prev):
            folded.append(v)
        else:
            flush()
            admitted = v.new + tuple(f"*{rid}" for rid in v.resumed)
            table.add_row(str(v.step), str(v.total), str(v.decode_reqs), _chunks(v.prefill_chunks), _ids(admitted),
                          _ids(v.preempted), _ids(v.finished), str(v.running), str(v.waiting),
                          str(v.free_blocks), style="bold red" if v.preempted else None)
        prev = v
    flush()
    return table


def print_steps(trace: Trace, console: Console | None = None) -> None:
    (console or Console()).print(step_table(trace))
