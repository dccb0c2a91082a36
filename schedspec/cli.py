"""`schedspec`: the command line.

Every user mistake (a bad config, a malformed file, an engine that crashes)
arrives here as a `SpecError` and leaves as one line on stderr with exit
status 2; a traceback means a bug in schedspec itself. Output files are
written atomically and never replace an existing file unless `--force` is
given, so nothing a user wrote is lost.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Sequence

from rich.console import Console

from .spec.errors import SpecError
from .spec.jsonio import write_json_atomic

EXIT_USER_ERROR = 2


def check_writable(path: str | None, force: bool, option: str) -> None:
    """Refuse to overwrite a file unless asked to: it may be the user's own."""
    if path and os.path.exists(path) and not force:
        raise SpecError(option, path, "exists; pass --force to overwrite it")


def cmd_simulate(args: argparse.Namespace, console: Console) -> int:
    from .reference_impl import simulate
    from .workloads import BUILTIN, load_workload

    if args.list:
        for name, make in BUILTIN.items():
            console.print(f"[bold]{name}[/]: {make().description.strip()}")
        return 0
    if args.workload is None:
        raise SpecError("WORKLOAD", None, "is required (a workload file or a built-in name; see --list)")
    check_writable(args.out, args.force, "--out")
    check_writable(args.plot, args.force, "--plot")
    trace = simulate(load_workload(args.workload))
    from .report import print_steps

    print_steps(trace, console)
    if args.out:
        write_json_atomic(args.out, trace.to_json())
        console.print(f"trace written to {args.out}")
    if args.plot:
        from .plot import plot_timelines

        plot_timelines([trace], args.plot)
        console.print(f"timeline written to {args.plot}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="schedspec", description="A formally checked specification of the vLLM 0.33.0 V1 scheduler.")
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
    from .mutants_cmd import add_mutants_parser
    from .prove_cmd import add_prove_parser

    add_prove_parser(sub)
    add_mutants_parser(sub)
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


if __name__ == "__main__":
    sys.exit(main())
