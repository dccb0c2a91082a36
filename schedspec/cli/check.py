"""`schedspec check`: a trace from any engine, judged by every monitor and every consistency rule."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..spec.trace import Trace
from .argparsing import Subcommands

if TYPE_CHECKING:
    from ..spec.trace_stream import StreamedTrace


def cmd_check(args: argparse.Namespace, console: Console) -> int:
    """The monitors judge each step; the consistency rules judge whether the steps follow from one another.

    A trace cut, spliced or edited by hand can pass every monitor, so both run,
    each as its own rows of the table, and either kind of violation fails.
    Both run in one pass over the steps as the file is read (`onepass.check_all`): memory is one step's, not the run's.
    """
    from ..spec.invariants import MONITORED
    from ..spec.invariants.consistency import RULES
    from ..spec.invariants.onepass import check_all
    from ..spec.trace_stream import KeysAfterSteps, open_trace

    trace = open_trace(args.trace)
    try:
        checked = check_all(trace, on_step=check_progress(trace))
    except KeysAfterSteps:  # a key after "steps" may override the head: only a whole load reads it right
        trace = Trace.load(args.trace)
        checked = check_all(trace, on_step=check_progress(trace))
    inconsistent, violations, total = checked.inconsistent, checked.violations, checked.num_steps
    names = [name for name, _ in RULES] + [i.name for i in MONITORED] + ["finished-reported-once", "stop-is-final"]
    table = Table(
        title=f"{args.trace}: {total} steps of engine {trace.engine!r}, {len(RULES)} consistency rules, "
        f"{len(names) - len(RULES)} invariants"
    )
    for col in ("check", "verdict", "first violation"):
        table.add_column(col)
    first = {v.invariant: v for v in inconsistent + violations}
    for name in names:
        v = first.get(name)
        table.add_row(
            name,
            ("[yellow]known violation" if v.known else "[red]violated") if v else "[green]holds",
            escape(f"step {v.step}: {v.detail}" + (f" (known for this release: {v.known})" if v.known else ""))
            if v
            else "",
            end_section=name == RULES[-1][0],
        )
    console.print(table)
    # A release's known violation (spec/versions.py) is reported, and fails nothing: that vLLM does break it.
    violations = [v for v in violations if not v.known]
    if inconsistent or violations:
        v = min(inconsistent + violations, key=lambda v: v.step)  # min keeps the first: consistency wins a tie
        console.print(
            f"first violation: step {v.step}: {v.invariant}: {v.detail}",
            style="red",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )  # one line, so logs can be grepped for it
        return 1
    return 0


def check_progress(trace: Trace | StreamedTrace, every: int = 1000) -> Callable[[int], None]:
    """A long trace says it is alive every `every` steps, for CI logs. A streamed trace's `len` is a quick extra
    pass (decoding only), so it is asked for only once `every` steps were checked: a short trace is read once."""
    total: list[int] = []

    def report(i: int) -> None:
        if (i + 1) % every:
            return
        if not total:
            total.append(len(trace.steps))
        if total[0] > every:
            for what in ("consistency", "invariants"):
                print(f"schedspec check: {what}: {i + 1}/{total[0]} steps", file=sys.stderr, flush=True)

    return report


def add_check_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "check",
        help="check a trace from any engine: every invariant at every step, and that its steps follow from one another",
    )
    p.add_argument("trace", metavar="TRACE.json")
    p.set_defaults(func=cmd_check)
