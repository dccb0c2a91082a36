"""`schedspec`: the command line.

Every user mistake (a bad config, a malformed file, an engine that crashes)
arrives here as a `SpecError` and leaves as one line on stderr with exit
status 2; a traceback means a bug in schedspec itself. Output files are
written atomically and never replace an existing file unless `--force` is
given, so nothing a user wrote is lost.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Sequence

from rich.console import Console

from .argparsing import EXIT_USER_ERROR, OneLineErrors
from .outdir import abandon_unfinished
from .spec.errors import SpecError


def cmd_simulate(args: argparse.Namespace, console: Console) -> int:
    """Stream the run: each step goes to the table, the trace file and the plot as it is made, then is dropped."""
    from .reference_impl.engine import ENGINE_NAME, simulate_steps
    from .report import StepTable
    from .spec.engine import trace_end
    from .steps import StepDigest
    from .tracefile import TraceWriter
    from .workloads import BUILTIN, load_workload

    if args.list:
        for name, make in BUILTIN.items():
            console.print(f"[bold]{name}[/]: {make().description.strip()}")
        return 0
    if args.workload is None:
        raise SpecError("WORKLOAD", None, "is required (a workload file or a built-in name; see --list)")
    from .outdir import check_output_file

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
        from .plot import plot_panels

        plot_panels([(workload, ENGINE_NAME, digests)], args.plot)
        console.print(f"timeline written to {args.plot}", markup=False, highlight=False)
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("schedspec")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="schedspec", description="A formally checked specification of the vLLM 0.33.0 V1 scheduler."
    )
    parser.add_argument("--version", action="version", version=f"schedspec {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("simulate", help="run a workload through the reference scheduler and print its steps")
    p.add_argument("workload", nargs="?", help="a workload JSON file or a built-in name")
    p.add_argument("--out", metavar="TRACE.json", help="write the trace here")
    p.add_argument("--plot", metavar="TIMELINE.png", help="draw the timeline here")
    p.add_argument("--list", action="store_true", help="list the built-in workloads")
    p.add_argument("--force", action="store_true", help="overwrite existing output files")
    p.set_defaults(func=cmd_simulate)

    from .conformance_cmds import add_check_parser, add_parsers

    add_parsers(sub)
    add_check_parser(sub)
    from .proof_cmds import add_parsers as add_proof_parsers

    add_proof_parsers(sub)
    from .hunt_cmd import add_hunt_parser
    from .mutants_cmd import add_mutants_parser
    from .prove_cmd import add_prove_parser

    add_prove_parser(sub)
    add_mutants_parser(sub)
    add_hunt_parser(sub)
    from .venvs_cmd import add_venvs_parser

    add_venvs_parser(sub)
    from .changelog_cmd import add_changelog_parser

    add_changelog_parser(sub)
    from .live_cmd import add_replay_live_parser

    add_replay_live_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    if not console.is_terminal:  # logs and pipes: wide enough for the step table
        console = Console(width=140)
    func: Callable[[argparse.Namespace, Console], int] = args.func
    try:
        return func(args, console)
    except SpecError as e:
        print(f"schedspec: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("schedspec: interrupted", file=sys.stderr)
        return 130
    finally:
        abandon_unfinished()  # an output folder prepared and never recorded: put the earlier run's files back


if __name__ == "__main__":
    sys.exit(main())
