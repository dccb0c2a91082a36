"""`schedspec certify` and `schedspec replay`: the harness, as a person drives it."""

from __future__ import annotations

import argparse
import os

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .conformance import certify as cert_mod
from .conformance.counterexample import Counterexample
from .conformance.differ import diff
from .conformance.registry import engine_factory
from .spec.errors import SpecError
from .spec.trace import Trace


def cmd_certify(args: argparse.Namespace, console: Console) -> int:
    shard = cert_mod.parse_shard(args.shard)
    tasks = cert_mod.plan(args.engine, args.against, args.level, args.family or list(cert_mod.FAMILIES),
                          args.workloads, args.seed, shard, args.out)
    if os.path.exists(os.path.join(args.out, "certificate.json")) and not args.force:
        raise SpecError("--out", args.out, "already holds a certificate; pass --force to replace it")
    failures = 0
    with Progress(TextColumn("certify {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[failures]} diverged"), TimeElapsedColumn(),
                  console=console, transient=not console.is_terminal) as progress:
        bar = progress.add_task(f"{args.engine} vs {args.against}", total=len(tasks), failures=0)

        def on_done(result) -> None:
            nonlocal failures
            failures += bool(result.divergence or result.nondeterministic or result.violations)
            progress.update(bar, advance=1, failures=failures)

        cert, results = cert_mod.certify(args.engine, args.against, tasks=tasks, jobs=args.jobs, shard=shard,
                                         workloads=args.workloads, out_dir=args.out, on_done=on_done)
    paths = cert_mod.write_outputs(args.out, cert, results)
    console.print(cert_mod.markdown(cert))
    console.print(f"written: {', '.join(paths)}")
    return 0 if cert["passed"] else 1


def cmd_replay(args: argparse.Namespace, console: Console) -> int:
    from .spec.jsonio import read_json

    data = read_json(args.file)
    if isinstance(data, dict) and data.get("kind") == "state":  # a proof's counterexample: one step from a state
        from .proofs.report import load_state_counterexample, replay_state

        broken, shown = replay_state(load_state_counterexample(args.file))
        for item in shown:
            console.print(item)
        return 1 if broken else 0
    cx = Counterexample.load(args.file)
    engine_b = args.engine or cx.engine_b
    check = [args.plot] if args.plot else []
    for path in check:
        if os.path.exists(path) and not args.force:
            raise SpecError("--plot", path, "exists; pass --force to overwrite it")
    result = diff(cx.workload, engine_factory(cx.engine_a), engine_factory(engine_b), cx.level, keep_records=True)
    d = result.divergence
    table = Table(title=f"{args.file}: {cx.engine_a} (a) vs {engine_b} (b), level {cx.level}")
    for col in ("step", f"a: {cx.engine_a}", f"b: {engine_b}", "preempted a / b", "admitted a / b"):
        table.add_column(col)
    for ra, rb in zip(result.records_a, result.records_b):
        table.add_row(str(ra.step), _tokens(ra), _tokens(rb),
                      f"{_ids(ra.output.preempted_req_ids)} / {_ids(rb.output.preempted_req_ids)}",
                      f"{_ids(n.req_id for n in ra.output.scheduled_new_reqs)} / {_ids(n.req_id for n in rb.output.scheduled_new_reqs)}")
    if d is not None:
        ra, rb = d.records
        table.add_row(str(d.step), _tokens(ra) if ra else "", _tokens(rb) if rb else "", "", "", style="bold")
        table.add_row("", f"[red]{d.field} = {d.a!r}", f"[red]{d.field} = {d.b!r}", "", "")
    console.print(table)
    if args.plot:
        from .plot import plot_timelines

        traces = [Trace(cx.workload, tuple(recs), name) for recs, name in
                  ((result.records_a, cx.engine_a), (result.records_b, engine_b))]
        plot_timelines(traces, args.plot, [f"{cx.engine_a} (a)", f"{engine_b} (b)"])
        console.print(f"timeline written to {args.plot}")
    if d is None:
        console.print(f"[green]no divergence: {cx.engine_a} and {engine_b} agree on all {result.steps_compared} steps")
        return 0
    console.print(f"[red]diverges at step {d.step}: {d.field}: a={d.a!r} b={d.b!r}")
    return 1


def _tokens(record) -> str:
    return " ".join(f"{k}:{v}" for k, v in record.output.num_scheduled_tokens.items()) or "{}"


def _ids(ids) -> str:
    return ",".join(ids) or "-"


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("certify", help="run a campaign of generated workloads against the oracle and write a certificate")
    p.add_argument("--engine", required=True, help="reference, vllm, torch, or module:callable")
    p.add_argument("--against", default="reference", help="the oracle engine (default: reference)")
    p.add_argument("--level", default="blocks", choices=["tokens", "lifecycle", "blocks"])
    p.add_argument("--family", action="append", help="a workload family (repeatable; default: all)")
    p.add_argument("--workloads", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shard", default="0/1", help="i/n: run every n-th workload starting at i")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", default="certificate", help="folder for the certificate, JUnit XML and counterexamples")
    p.add_argument("--force", action="store_true", help="replace a certificate already in --out")
    p.set_defaults(func=cmd_certify)

    p = sub.add_parser("replay", help="replay a counterexample on two engines, side by side")
    p.add_argument("file")
    p.add_argument("--engine", help="replay against this engine instead of the recorded one")
    p.add_argument("--plot", metavar="TIMELINE.png")
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_replay)


def cmd_check(args: argparse.Namespace, console: Console) -> int:
    from .spec.invariants import INVARIANTS, check_trace

    trace = Trace.load(args.trace)
    violations = check_trace(trace)
    table = Table(title=f"{args.trace}: {len(trace.steps)} steps of engine {trace.engine!r}, "
                        f"{len(INVARIANTS) + 2} invariants")
    for col in ("invariant", "verdict", "first violation"):
        table.add_column(col)
    first = {v.invariant: v for v in violations}
    for name in [i.name for i in INVARIANTS] + ["finished-reported-once", "stop-is-final"]:
        v = first.get(name)
        table.add_row(name, "[red]violated" if v else "[green]holds", f"step {v.step}: {v.detail}" if v else "")
    console.print(table)
    if violations:
        v = violations[0]
        console.print(f"[red]first violation: step {v.step}: {v.invariant}: {v.detail}")
        return 1
    return 0


def add_check_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="check every invariant at every step of a trace, from any engine")
    p.add_argument("trace", metavar="TRACE.json")
    p.set_defaults(func=cmd_check)
