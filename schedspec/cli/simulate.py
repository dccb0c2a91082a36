"""`schedspec simulate`: a workload through the reference, streamed.

Each step goes to the step table, the trace file and the timeline as it
is made, then is dropped, so memory is one step's however long the run.
"""

from __future__ import annotations

import argparse
import contextlib

from rich.console import Console

from ..conformance.workloads.builtin import BUILTIN, load_workload
from ..outdir import check_output_file
from ..reference_impl.engine import ENGINE_NAME, simulate_steps
from ..render.step_digest import StepDigest
from ..render.step_table import StepTable
from ..spec.engine import trace_end
from ..spec.errors import SpecError
from ..spec.trace_writer import TraceWriter
from .argparsing import Subcommands


def cmd_simulate(args: argparse.Namespace, console: Console) -> int:
    """Stream the run: each step goes to the table, the trace file and the plot as it is made, then is dropped."""

    if args.list:
        for name, make in BUILTIN.items():
            console.print(f"[bold]{name}[/]: {make().description.strip()}")
        return 0
    if args.workload is None:
        raise SpecError("WORKLOAD", None, "is required (a workload file or a built-in name; see --list)")

    check_output_file(args.out, args.force, "--out")
    check_output_file(args.plot, args.force, "--plot")
    workload = load_workload(args.workload)
    table = StepTable(workload)
    digests: list[StepDigest] | None = [] if args.plot else None
    finished: set[str] = set()
    last = None
    with TraceWriter(args.out, workload, ENGINE_NAME) if args.out else contextlib.nullcontext() as trace_file:
        for last in simulate_steps(workload):
            view = table.add(last)
            finished.update(last.finished)
            if trace_file is not None:
                trace_file.add(last)
            if digests is not None:
                digests.append(view)
        end = trace_end(last, workload)
        console.print(table.table(ENGINE_NAME, end))
        if end == "max_steps":  # the caption alone read like a normal end
            unfinished = len(workload.requests) - len(finished)
            why = (
                f"with {unfinished} requests unfinished: a livelock, or max_steps too small"
                if unfinished
                else "before the last finish was reported: max_steps too small"
            )
            console.print(
                f"stopped at max_steps={workload.max_steps} {why}", style="yellow", markup=False, highlight=False
            )
        if trace_file is not None:
            trace_file.finish(end)
            console.print(f"trace written to {args.out}", markup=False, highlight=False)
    if digests is not None:  # --plot
        from ..render.timeline import plot_panels

        plot_panels([(workload, ENGINE_NAME, digests)], args.plot)
        console.print(f"timeline written to {args.plot}", markup=False, highlight=False)
    return 0


def add_simulate_parser(sub: Subcommands) -> None:
    p = sub.add_parser("simulate", help="run a workload through the reference scheduler and print its steps")
    p.add_argument("workload", nargs="?", help="a workload JSON file or a built-in name")
    p.add_argument("--out", metavar="TRACE.json", help="write the trace here")
    p.add_argument("--plot", metavar="TIMELINE.png", help="draw the timeline here")
    p.add_argument("--list", action="store_true", help="list the built-in workloads")
    p.add_argument("--force", action="store_true", help="overwrite existing output files")
    p.set_defaults(func=cmd_simulate)
