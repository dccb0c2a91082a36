"""`schedspec hunt`: a Hypothesis state machine drives an engine in lock-step with the reference.

Where `certify` runs a campaign of workloads generated up front, `hunt`
lets Hypothesis choose each next event (an arrival, an abort, a step) from
the state reached, compares both engines' records at `--level` and runs
every invariant monitor on the engine's trace after every step
(`conformance/search/lockstep_machine.py`). A failure is shrunk to a minimal run
and written to `--out` as `counterexample.json`, which `schedspec replay`
reads, beside `workload.json` (the run as a workload) and `hunt.json`.

The search is `--examples` examples derandomized from `--seed`: the same
examples on any machine, however loaded.

Exit status: 0 nothing found in the examples; 1 a divergence, a broken
invariant or a crash of the engine's scheduler; 2 bad input (one line that
names the option and the value); 3 the engine failed as a program (it did
not start, died, hung past `--step-timeout`, or answered something
malformed), which is never shrunk.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rich.console import Console

from ..conformance.harness.compare import LEVELS
from ..conformance.search.budget import DEFAULT_EXAMPLES
from ..outdir import OutDir
from ..spec.errors import SpecError
from ..spec.jsonio import write_json_atomic
from .argparsing import Subcommands
from .run_options import check_seconds, progress

OUTPUTS = ("hunt.json", "counterexample.json", "workload.json")
MAX_EXAMPLES = 10_000_000


def _check_args(args: argparse.Namespace) -> None:
    if not 1 <= args.examples <= MAX_EXAMPLES:
        raise SpecError("--examples", args.examples, f"must be from 1 to {MAX_EXAMPLES}")
    if not 0 <= args.seed < 2**63:
        raise SpecError("--seed", args.seed, "must be from 0 to 2**63 - 1")
    if args.level not in LEVELS:
        raise SpecError("--level", args.level, f"must be one of {', '.join(LEVELS)}")
    check_seconds("--step-timeout", args.step_timeout)
    check_seconds("--start-timeout", args.start_timeout)


def cmd_hunt(args: argparse.Namespace, console: Console) -> int:
    from ..conformance.engines.engine_spec import parse_engine
    from ..conformance.engines.registry import engine_factory, engine_version
    from ..conformance.harness.counterexample import Counterexample
    from ..conformance.harness.differ import Divergence
    from ..conformance.search.lockstep_hunt import hunt_engine_full
    from ..conformance.search.lockstep_machine import EngineBroke

    _check_args(args)
    out = OutDir(args.out, args.force, "--out", "hunt")
    out.prepare(OUTPUTS)  # before the first example, not after an hour of them
    engine = parse_engine(args.engine)
    factory = engine_factory(engine, start_timeout_s=args.start_timeout, step_timeout_s=args.step_timeout)
    scope = "the core scope" if args.core else "the full scope"
    progress(
        "hunt",
        f"{args.examples} examples of {args.engine} in lock-step with the reference at level {args.level}, "
        f"{scope}, seed {args.seed}",
    )
    summary: dict[str, Any] = {
        "engine": engine.name,
        "versions": {"a": engine_version(parse_engine("reference")), "b": engine_version(engine)},
        "level": args.level,
        "examples": args.examples,
        "seed": args.seed,
        "scope": "core" if args.core else "full",
    }
    written = [out.file(OUTPUTS[0])]
    try:
        found = hunt_engine_full(
            factory,
            args.engine,
            examples=args.examples,
            seed=args.seed,
            level=args.level,
            core=args.core,
            step_timeout_s=args.step_timeout,
            start_timeout_s=args.start_timeout,
            on_example=_progress(args.examples),
        )
    except EngineBroke as e:
        summary |= {"verdict": "error", "error": e.error.to_json()}
        write_json_atomic(written[0], summary)
        out.record(written)
        console.print(
            f"hunt could not judge the engine: {e.error}\nfix: {e.error.fix}",
            style="red",
            markup=False,
            highlight=False,
        )
        return 3
    finally:
        close_all = getattr(factory, "close_all", None)
        if close_all is not None:
            close_all()
    if found is None:
        summary["verdict"] = "passed"
        write_json_atomic(written[0], summary)
        out.record(written)
        console.print(
            f"no divergence, broken invariant or crash in {args.examples} examples: {args.engine} agrees with the "
            f"reference at level {args.level}",
            style="green",
            markup=False,
            highlight=False,
        )
        return 0
    f = found.finding
    d = found.divergence
    if d is None:  # the engines agree at this level, but the engine broke an invariant (or diverged only idle)
        step, field, a, b = found.machine_divergence
        d = Divergence(step, field, a, b, None)
    cx = Counterexample.of(f.workload, d, "reference", args.engine, args.level, summary["versions"], f.workload, 0)
    paths = [out.file(OUTPUTS[1]), out.file(OUTPUTS[2])]
    cx.write(paths[0])
    write_json_atomic(paths[1], f.workload.to_json())
    summary |= {
        "verdict": "failed",
        "what": f.what,
        "size": {"requests": f.size[0], "steps": f.size[1]},
        "examples_to_failure": f.examples,
        "divergence": d.to_json(),
        "program": f.original.splitlines(),
    }
    write_json_atomic(written[0], summary)
    written += paths
    out.record(written)
    console.print(
        f"{args.engine} fails after {f.examples} examples: {f.what}; shrunk to {f.size[0]} requests and "
        f"{f.size[1]} steps; at step {d.step}: {d.field}: a={d.a!r} b={d.b!r}",
        style="red",
        markup=False,
        highlight=False,
    )
    console.print(f"replay it: schedspec replay {paths[0]}", markup=False, highlight=False)
    return 1


def _progress(total: int) -> Callable[[int], None]:
    """A line on stderr every tenth of the examples searched."""
    every = max(total // 10, 1)

    def report(begun: int) -> None:
        if begun % every == 0 and begun <= total:
            progress("hunt", f"{begun}/{total} examples begun, nothing found yet")

    return report


def add_hunt_parser(sub: Subcommands) -> None:
    p = sub.add_parser("hunt", help="drive an engine in lock-step with the reference from a Hypothesis state machine")
    p.add_argument("--engine", required=True, help="reference, vllm, torch, or module:callable")
    p.add_argument(
        "--examples",
        type=int,
        default=DEFAULT_EXAMPLES,
        metavar="N",
        help=f"Hypothesis examples, derandomized: the same on any machine (default {DEFAULT_EXAMPLES})",
    )
    p.add_argument("--seed", type=int, default=0, metavar="S", help="the examples' seed (default 0)")
    p.add_argument("--level", default="blocks", metavar="L", help=f"one of {', '.join(LEVELS)} (default blocks)")
    p.add_argument(
        "--core",
        action="store_true",
        help="draw the core scope only: no prefix caching, spec decode or async scheduling",
    )
    p.add_argument("--out", default="hunt", metavar="DIR", help="folder for hunt.json and a counterexample")
    p.add_argument("--force", action="store_true", help="replace an earlier run's outputs in --out")
    p.add_argument(
        "--step-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds one engine call may take before the engine counts as hung (exit 3; default 30)",
    )
    p.add_argument(
        "--start-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds an engine may take to start; retried once (default 300)",
    )
    p.set_defaults(func=cmd_hunt)
