"""`schedspec certify` and `schedspec replay`: the harness, as a person drives it.

Both show a counterexample the same way: the few steps before the
divergence as a table (`conformance/explain.py`), the diverging field in
red, and a PNG timeline of both engines' whole runs side by side, with the
diverging step marked. Timelines need the engines again, so certify draws
only the first `TIMELINES` counterexamples.
"""

from __future__ import annotations

import argparse
import os

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .conformance import certify as cert_mod
from .conformance.counterexample import Counterexample
from .conformance.differ import diff
from .conformance.explain import WINDOW, step_table
from .conformance.registry import engine_factory, vllm_source_engine
from .spec.errors import SpecError
from .spec.trace import Trace


TIMELINES = 5


def cmd_certify(args: argparse.Namespace, console: Console) -> int:
    shard = cert_mod.parse_shard(args.shard)
    if args.vllm_source is not None:
        if args.engine != "vllm":
            raise SpecError("--vllm-source", args.vllm_source, f"needs --engine vllm, not --engine {args.engine}")
        args.engine = vllm_source_engine(args.vllm_source)
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
                                         workloads=args.workloads, out_dir=args.out, on_done=on_done,
                                         allow_divergence=args.allow_divergence)
    write_timelines(cert)
    paths = cert_mod.write_outputs(args.out, cert, results)
    console.print(cert_mod.markdown(cert), markup=False, highlight=False, soft_wrap=True)
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
    engine_b = vllm_source_engine(args.vllm_source) if args.vllm_source else (args.engine or cx.engine_b)
    if args.plot and os.path.exists(args.plot) and not args.force:
        raise SpecError("--plot", args.plot, "exists; pass --force to overwrite it")
    result = diff(cx.workload, engine_factory(cx.engine_a), engine_factory(engine_b), cx.level, keep_records=True)
    d = result.divergence
    console.print(f"{args.file}: workload {cx.workload.name!r}, {len(cx.workload.requests)} requests, level {cx.level}",
                  markup=False, highlight=False)
    for side, name in (("a", cx.engine_a), ("b", cx.engine_b)):  # as recorded: the versions that diverged
        console.print(f"  {side}: {name}: {cx.versions.get(side, 'version not recorded')}", markup=False, highlight=False)
    if engine_b != cx.engine_b:
        console.print(f"  replaying b as {engine_b}", markup=False, highlight=False)
    if d is None:
        console.print(f"[green]no divergence: {cx.engine_a} and {engine_b} agree on all {result.steps_compared} steps")
    else:
        console.print(_rich_table(step_table(result.records_a, result.records_b, d, args.window), cx.engine_a, engine_b))
        console.print(f"diverges at step {d.step}: {d.field}: a={d.a!r} b={d.b!r}", style="red", markup=False, highlight=False)
    from .spec.invariants import check_trace

    broken = check_trace(Trace(cx.workload, tuple(_whole_run(cx.workload, engine_b)), engine_b, "max_steps"))
    for v in broken[:5]:
        console.print(f"engine b breaks invariant {v.invariant} at step {v.step}: {v.detail}", style="red",
                      markup=False, highlight=False)
    if args.plot:
        plot_pair(cx, engine_b, args.plot, None if d is None else d.step)
        console.print(f"timeline written to {args.plot}", markup=False)
    return 0 if d is None else 1


def _rich_table(table: dict, name_a: str, name_b: str) -> Table:
    """`explain.step_table` for a terminal: the diverging row bold, the diverging cells red."""
    out = Table(title=f"diverges at step {table['step']} on {table['field']}")
    tokens_is_field = table["field"] == "output.num_scheduled_tokens"
    cols = ["step", f"scheduled (a: {name_a})", f"scheduled (b: {name_b})", "preempted a / b"]
    cols += [] if tokens_is_field else [f"{table['field']} (a)", f"{table['field']} (b)"]
    for col in cols:
        out.add_column(escape(col))
    for r in table["rows"]:
        red = (lambda x: f"[red]{escape(x)}[/]") if r["diverges"] else escape
        cells = [escape(f"{r['step']} <-" if r["diverges"] else str(r["step"])),
                 (red if tokens_is_field else escape)(r["tokens_a"]), (red if tokens_is_field else escape)(r["tokens_b"]),
                 escape(r["preempted"])]
        cells += [] if tokens_is_field else [red(r["field_a"]), red(r["field_b"])]
        out.add_row(*cells, style="bold" if r["diverges"] else None)
    return out


def _whole_run(workload, name: str) -> list:
    """An engine's whole run on its own, through the differ's timeouts and crash handling."""
    make = engine_factory(name)
    return diff(workload, make, make, "blocks", keep_records=True).records_a


def plot_pair(cx: Counterexample, engine_b: str, path: str, mark_step: int | None) -> None:
    """Both engines' whole runs as timeline panels, one above the other, the divergence marked."""
    from .plot import plot_timelines

    w = cx.workload
    if mark_step is not None:  # shrinking cuts max_steps down to the divergence: let both runs go on past it
        w = w.replace(max_steps=max(w.max_steps, mark_step + 30))
    traces = [Trace(w, tuple(_whole_run(w, name)), name) for name in (cx.engine_a, engine_b)]
    plot_timelines(traces, path, [f"{cx.engine_a} (a)", f"{engine_b} (b)"], mark_step=mark_step)


def write_timelines(cert: dict, limit: int = TIMELINES) -> None:
    """A PNG beside each of the first `limit` counterexample files; its path goes into the certificate.

    An engine that crashed or hung has no timeline worth re-running it for.
    A picture that cannot be drawn is noted, never allowed to cost the certificate.
    """
    drawable = [c for c in cert["counterexamples"]
                if c.get("file") and c.get("shrunk") and not c["shrunk"]["field"].startswith(("engine", "malformed"))]
    for c in drawable[:limit]:
        png = os.path.splitext(c["file"])[0] + ".png"
        try:
            plot_pair(Counterexample.load(c["file"]), cert["engine"], png, c["shrunk"]["step"])
            c["timeline"] = png
        except Exception as e:  # noqa: BLE001
            c["timeline_error"] = f"{type(e).__name__}: {e}"


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
    p.add_argument("--vllm-source", metavar="PATH", help="with --engine vllm: run the vLLM source tree at PATH "
                   "(a checkout holding vllm/) on the pinned venv's dependencies")
    p.add_argument("--allow-divergence", action="store_true",
                   help="list departures from the oracle instead of failing; fail only on invariants and nondeterminism")
    p.set_defaults(func=cmd_certify)

    p = sub.add_parser("replay", help="replay a counterexample on two engines, side by side")
    p.add_argument("file")
    p.add_argument("--engine", help="replay against this engine instead of the recorded one")
    p.add_argument("--vllm-source", metavar="PATH", help="replay engine b as vLLM from this source tree")
    p.add_argument("--window", type=int, default=WINDOW, help="steps shown before the divergence")
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
