"""The per-step table `schedspec simulate` prints.

Quiet steps (pure decode, nothing admitted, preempted or finished) are folded
into one line per run of them, so a 1000-step trace still reads as its events.

The table is built a step at a time (`StepTable.add`), so that a streamed run
keeps only the rows, a few short strings each, and never the records: the
records carry every live request's state and are what made a 50,000-request
simulation take gigabytes.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console, JustifyMethod
from rich.table import Table

from ..spec.trace import StepRecord, Trace
from ..spec.workload import Workload
from .step_digest import StepDigest, step_digest

MAX_LISTED = 4


def add_name_column(table: Table, header: str, names: Iterable[str]) -> None:
    """A table's first column of names (mutants, invariants, releases), never cut: at least as wide as the
    longest name, kept on one line, so a narrow terminal wraps the other cells instead of eliding a name
    ("Z12-leak-…" at 80 columns, before)."""
    table.add_column(header, no_wrap=True, min_width=max((len(n) for n in names), default=len(header)))


_COLUMNS: list[tuple[str, JustifyMethod]] = [
    ("step", "right"),
    ("tokens", "right"),
    ("decodes", "right"),
    ("prefill chunks", "left"),
    ("admitted", "left"),  # a resumed request is starred (the caption says so)
    ("preempted", "left"),
    ("finished", "left"),
    ("run", "right"),
    ("wait", "right"),
    ("free blk", "right"),
]


def _ids(ids: tuple[str, ...]) -> str:
    if len(ids) <= MAX_LISTED:
        return " ".join(ids)
    return " ".join(ids[:MAX_LISTED]) + f" +{len(ids) - MAX_LISTED}"


def _chunks(chunks: tuple[tuple[str, int], ...]) -> str:
    shown = " ".join(f"{rid}:{n}" for rid, n in chunks[:MAX_LISTED])
    return shown + (f" +{len(chunks) - MAX_LISTED}" if len(chunks) > MAX_LISTED else "")


def _quiet(v: StepDigest, prev: StepDigest | None) -> bool:
    return (
        prev is not None
        and not (v.prefill_chunks or v.new or v.resumed or v.preempted or v.finished)
        and (v.decode_reqs, v.running, v.waiting) == (prev.decode_reqs, prev.running, prev.waiting)
    )


class StepTable:
    """The rows of the table so far; a run of quiet steps is held as its first and last view only."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.num_steps = 0
        self._rows: list[tuple[tuple[str, ...], str | None]] = []  # (cells, style)
        self._prev: StepDigest | None = None
        self._folded: tuple[StepDigest, StepDigest] | None = None

    def add(self, record: StepRecord) -> StepDigest:
        """Take one step's record; its view is returned for whoever else draws the run (the plot)."""
        v = step_digest(record, self.workload)
        self.num_steps += 1
        if _quiet(v, self._prev):
            self._folded = (self._folded[0] if self._folded else v, v)
        else:
            self._flush()
            admitted = v.new + tuple(f"*{rid}" for rid in v.resumed)
            self._rows.append(
                (
                    (
                        str(v.step),
                        str(v.total),
                        str(v.decode_reqs),
                        _chunks(v.prefill_chunks),
                        _ids(admitted),
                        _ids(v.preempted),
                        _ids(v.finished),
                        str(v.running),
                        str(v.waiting),
                        str(v.free_blocks),
                    ),
                    "bold red" if v.preempted else None,
                )
            )
        self._prev = v
        return v

    def _flush(self) -> None:
        if self._folded:
            a, b = self._folded
            self._rows.append(
                (
                    (
                        f"{a.step}-{b.step}" if a is not b else str(a.step),
                        str(a.total),
                        str(a.decode_reqs),
                        "",
                        "",
                        "",
                        "",
                        str(b.running),
                        str(b.waiting),
                        str(b.free_blocks),
                    ),
                    "dim",
                )
            )
            self._folded = None

    def table(self, engine: str, end: str) -> Table:
        self._flush()
        w = self.workload
        table = Table(
            title=f"{w.name or 'workload'}: {self.num_steps} steps, budget {w.config.token_budget}, "
            f"{w.config.num_usable_blocks} usable blocks, {w.config.policy}",
            caption=f"engine: {engine}; end: {end}; *: resumed after a preemption",
        )
        for col, justify in _COLUMNS:
            # The id lists wrap, between ids (each id one word); the numbers never do. At 100 columns the
            # table then fits, where before its right-hand columns were cut off.
            wraps = col in ("prefill chunks", "admitted", "preempted", "finished")
            table.add_column(col, justify=justify, no_wrap=not wraps, min_width=9 if wraps else None)
        for cells, style in self._rows:
            table.add_row(*cells, style=style)
        return table


def step_table(trace: Trace) -> Table:
    steps = StepTable(trace.workload)
    for record in trace.steps:
        steps.add(record)
    return steps.table(trace.engine, trace.end)


def print_steps(trace: Trace, console: Console | None = None) -> None:
    (console or Console()).print(step_table(trace))
