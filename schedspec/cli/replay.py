"""`schedspec replay`: a counterexample replayed on two engines, side by side.

It shows the few steps before the divergence as a table
(`conformance/harness/explain.py`, drawn by `render/side_by_side.py`), the
diverging field in red, the invariants engine b breaks, and with `--plot`
both engines' whole runs as timelines. A proof's counterexample (a state,
not a workload) is replayed one step on the reference instead.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.console import Console

from ..conformance.engines.engine_spec import parse_engine
from ..conformance.engines.registry import engine_factory, vllm_source_engine
from ..conformance.harness.counterexample import Counterexample
from ..conformance.harness.differ import diff
from ..conformance.harness.explain import WINDOW, side_by_side
from ..render.counterexample_timelines import plot_pair, whole_run
from ..render.side_by_side import rich_side_by_side
from ..spec.trace import Trace
from .argparsing import Subcommands
from .run_options import check_seconds

if TYPE_CHECKING:
    pass


def cmd_replay(args: argparse.Namespace, console: Console) -> int:
    from ..spec.jsonio import read_json

    data = read_json(args.file)
    if isinstance(data, dict) and data.get("kind") == "state":  # a proof's counterexample: one step from a state
        from ..proofs.runs.report import load_state_counterexample, replay_state

        broken, shown = replay_state(load_state_counterexample(args.file))
        for item in shown:
            console.print(item)
        return 1 if broken else 0
    check_seconds("--step-timeout", args.step_timeout)  # as hunt refuses them
    check_seconds("--start-timeout", args.start_timeout)
    cx = Counterexample.load(args.file)
    engine_a = parse_engine(cx.engine_a, "engine_a")  # as the file names it
    if args.vllm_source:
        engine_b = vllm_source_engine(args.vllm_source)
    else:
        engine_b = parse_engine(args.engine) if args.engine else parse_engine(cx.engine_b, "engine_b")
    from ..outdir import check_output_file

    check_output_file(args.plot, args.force, "--plot")
    deadlines = {"start_timeout_s": args.start_timeout, "step_timeout_s": args.step_timeout}
    result = diff(
        cx.workload,
        engine_factory(engine_a, **deadlines),
        engine_factory(engine_b, **deadlines),
        cx.level,
        args.step_timeout,
        keep_records=True,
        start_timeout=args.start_timeout,
        names=(engine_a.name, engine_b.name),
    )
    if result.error is not None:
        console.print(
            f"replay could not judge the engines: {result.error}\nfix: {result.error.fix}",
            style="red",
            markup=False,
            highlight=False,
        )
        return 3
    d = result.divergence
    console.print(
        f"{args.file}: workload {cx.workload.name!r}, {len(cx.workload.requests)} requests, level {cx.level}",
        markup=False,
        highlight=False,
    )
    for side, name in (("a", cx.engine_a), ("b", cx.engine_b)):  # as recorded: the versions that diverged
        console.print(
            f"  {side}: {name}: {cx.versions.get(side, 'version not recorded')}", markup=False, highlight=False
        )
    if engine_b.name != cx.engine_b:
        console.print(f"  replaying b as {engine_b}", markup=False, highlight=False)
    if d is None:
        console.print(f"[green]no divergence: {cx.engine_a} and {engine_b} agree on all {result.steps_compared} steps")
    else:
        console.print(
            rich_side_by_side(
                side_by_side(result.records_a, result.records_b, d, args.window), cx.engine_a, engine_b.name
            )
        )
        console.print(
            f"diverges at step {d.step}: {d.field}: a={d.a!r} b={d.b!r}", style="red", markup=False, highlight=False
        )
    from ..spec.invariants import check_trace

    violations = check_trace(Trace(cx.workload, tuple(whole_run(cx.workload, engine_b)), engine_b.name, "max_steps"))
    for v in violations[:5]:
        console.print(
            f"engine b breaks invariant {v.invariant} at step {v.step}: {v.detail}",
            style="red",
            markup=False,
            highlight=False,
        )
    if args.plot:
        plot_pair(cx, engine_b, args.plot, None if d is None else d.step)
        console.print(f"timeline written to {args.plot}", markup=False)
    return 0 if d is None else 1


def add_replay_parser(sub: Subcommands) -> None:
    p = sub.add_parser("replay", help="replay a counterexample on two engines, side by side")
    p.add_argument("file")
    p.add_argument("--engine", help="replay against this engine instead of the recorded one")
    p.add_argument("--vllm-source", metavar="PATH", help="replay engine b as vLLM from this source tree")
    p.add_argument("--window", type=int, default=WINDOW, help="steps shown before the divergence")
    p.add_argument(
        "--plot", metavar="TIMELINE.png", help="draw both runs' timelines here, one above the other on the same scales"
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing --plot file")
    p.add_argument(
        "--step-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds one engine call may take before the replay is an error (default: 30)",
    )
    p.add_argument(
        "--start-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds an engine may take to start (default: 300)",
    )
    p.set_defaults(func=cmd_replay)
