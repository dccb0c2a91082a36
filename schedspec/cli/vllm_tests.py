"""`schedspec vllm-tests`: vLLM's own scheduler tests, every scheduler they build watched and replayed.

Exit status: 0 when no test changed outcome under the monitors, the wrapper
had no error, no monitor reported on an in-scope session, and every
in-scope session replayed step for step; 1 otherwise (each failing test is
a row of `report.md` and a failure in `junit.xml`); 2 bad input; 3 the
suite could not be run (the sdist not fetched, pytest not installed, a run
that died or hung), which is never a pass.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from ..conformance.vllm_suite.report import junit, markdown
from ..conformance.vllm_suite.suite import MODES, run_suite
from ..outdir import OutDir
from ..spec.errors import InfrastructureError
from ..spec.jsonio import write_bytes_atomic, write_json_atomic
from ..spec.versions import DEFAULT_RELEASE, RELEASES
from .argparsing import Subcommands

OUTPUTS = ("report.md", "report.json", "junit.xml")


def cmd_vllm_tests(args: argparse.Namespace, console: Console) -> int:
    out = OutDir(args.out, args.force, "--out", "vllm-tests")
    out.prepare(OUTPUTS)
    try:
        table, summary = run_suite(args.vllm_version, args.mode, args.k, args.jobs, Path(out.dir), args.file)
    except InfrastructureError as e:
        console.print(f"vllm-tests could not run the suite: {e}", style="red", markup=False, highlight=False)
        return 3
    paths = [out.file(n) for n in OUTPUTS]
    text = markdown(args.vllm_version, args.mode, table, summary)
    write_bytes_atomic(paths[0], text.encode())
    write_json_atomic(paths[1], {"release": args.vllm_version, "mode": args.mode, "totals": summary,
                                  "tests": [{**r.__dict__, "problems": r.problems} for r in table]})  # fmt: skip
    write_bytes_atomic(paths[2], junit(args.vllm_version, table))
    out.record(paths)
    console.print("\n".join(text.splitlines()[:7]), markup=False, highlight=False, soft_wrap=True)
    failing = [r for r in table if r.problems]
    for r in failing[:20]:
        console.print(f"{r.nodeid}: {r.problems[0]}", style="red", markup=False, highlight=False, soft_wrap=True)
    console.print(f"written: {', '.join(out.final(p) for p in paths)}", markup=False, highlight=False)
    return 1 if failing else 0


def add_vllm_tests_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "vllm-tests", help="run vLLM's own scheduler tests with every scheduler monitored, and replay them"
    )
    p.add_argument("--vllm-version", default=DEFAULT_RELEASE, choices=RELEASES, metavar="V",
                   help=f"the release whose tests run, in its venv (default: {DEFAULT_RELEASE})")  # fmt: skip
    p.add_argument("-k", metavar="EXPR", help="only the tests pytest's -k selects")
    p.add_argument(
        "--file",
        action="append",
        metavar="PATH",
        help="a test file, relative to the sdist's root (repeatable; default: every file under tests/v1/core that "
        "builds a scheduler)",
    )
    p.add_argument(
        "--mode", default="log", choices=MODES, help="what a broken invariant does in the tests (default: log)"
    )
    p.add_argument(
        "--jobs", type=int, default=1, help="pytest processes per run, each given every J-th file (default: 1)"
    )
    p.add_argument("--out", default="vllm-tests", metavar="DIR", help="folder for the report (default: vllm-tests)")
    p.add_argument("--force", action="store_true", help="replace an earlier run's outputs in --out")
    p.set_defaults(func=cmd_vllm_tests)
