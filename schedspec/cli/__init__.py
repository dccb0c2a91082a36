"""`schedspec`: the command line, one module per command, named after it.

This package parses options into typed values, calls the library, and
prints; nothing outside it imports it (`tests/unit/project/test_layers.py`), so the
library never depends on argument parsing.

Every user mistake (a bad config, a malformed file, an engine that crashes)
arrives here as a `SpecError` and leaves as one line on stderr with exit
status 2; a traceback means a bug in schedspec itself. Output files are
written atomically and never replace an existing file unless `--force` is
given, so nothing a user wrote is lost.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console

from ..outdir import abandon_unfinished
from ..spec.errors import SpecError
from .argparsing import EXIT_USER_ERROR, OneLineErrors
from .certify import add_certify_parser
from .changelog import add_changelog_parser
from .check import add_check_parser
from .contracts import add_contracts_parser
from .hunt import add_hunt_parser
from .merge import add_merge_parser
from .mutants import add_mutants_parser
from .prove import add_prove_parser
from .replay import add_replay_parser
from .replay_live import add_replay_live_parser
from .serve_check import add_serve_check_parser
from .simulate import add_simulate_parser
from .venvs import add_venvs_parser
from .vllm_tests import add_vllm_tests_parser


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
    for add in (
        add_simulate_parser,
        add_certify_parser,
        add_merge_parser,
        add_replay_parser,
        add_check_parser,
        add_contracts_parser,
        add_prove_parser,
        add_mutants_parser,
        add_hunt_parser,
        add_venvs_parser,
        add_changelog_parser,
        add_replay_live_parser,
        add_vllm_tests_parser,
        add_serve_check_parser,
    ):  # the order `schedspec --help` lists them in
        add(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI runner's cancel, `kill`): unwound like ^C, so every cleanup that ^C runs runs too."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    if not console.is_terminal:  # logs and pipes: wide enough for the step table
        console = Console(width=140)
    func: Callable[[argparse.Namespace, Console], int] = args.func
    # SIGTERM's default kills the process where it stands: temporary files, a staging folder and
    # workers left behind. As an exception it unwinds like ^C (exit 143, as the shell reports it).
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main_thread else None
    try:
        return func(args, console)
    except SpecError as e:
        print(f"schedspec: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except Terminated:
        print("schedspec: terminated (SIGTERM); the earlier outputs are as they were", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("schedspec: interrupted", file=sys.stderr)
        return 130
    finally:
        if previous is not None:  # a second SIGTERM must not cut the clean-up short
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        abandon_unfinished()  # an output folder prepared and never recorded: the earlier run stays as it was
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
