"""`schedspec certify` and `schedspec replay`: the harness, as a person drives it.

Both show a counterexample the same way: the few steps before the
divergence as a table (`conformance/harness/explain.py`), the diverging field in
red, and a PNG timeline of both engines' whole runs side by side, with the
diverging step marked. Timelines need the engines again, so certify draws
only the first `TIMELINES` counterexamples.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .argparsing import Subcommands
from .conformance.campaign import certify as cert_mod
from .conformance.campaign.task import WorkloadResult
from .conformance.engines.registry import certify_engine, engine_factory, vllm_source_engine
from .conformance.harness.counterexample import Counterexample
from .conformance.harness.differ import diff
from .conformance.harness.explain import WINDOW, side_by_side
from .spec.trace import StepRecord, Trace
from .spec.workload import Workload

if TYPE_CHECKING:
    from .spec.trace_stream import StreamedTrace

TIMELINES = 5


def cmd_certify(args: argparse.Namespace, console: Console) -> int:
    from .outdir import OutDir

    shard = cert_mod.parse_shard(args.shard)
    args.engine = certify_engine(args.engine, args.vllm_source, args.vllm_version)
    options = cert_mod.Options(
        jobs=args.jobs,
        step_timeout_s=args.step_timeout,
        start_timeout_s=args.start_timeout,
        isolate=args.isolate,
        shrink_budget=args.shrink_budget,
        max_counterexamples=args.max_counterexamples,
        max_errors=args.max_errors,
    )
    tasks = cert_mod.plan(
        args.engine,
        args.against,
        args.level,
        args.family or list(cert_mod.FAMILIES),
        args.workloads,
        args.seed,
        shard,
        args.out,
        options,
    )
    out = OutDir(args.out, args.force, "--out", "certify")
    out.prepare(cert_mod.OUTPUT_NAMES, cert_mod.OUTPUT_PATTERNS)
    progress = CampaignProgress(console, len(tasks), f"{args.engine} vs {args.against}")
    with progress:  # an interrupt: cli.main puts --out back as it was (outdir.abandon_unfinished)
        cert, results = cert_mod.certify(
            args.engine,
            args.against,
            tasks=tasks,
            options=options,
            shard=shard,
            workloads=args.workloads,
            out_dir=args.out,
            on_done=progress.done,
            allow_divergence=args.allow_divergence,
        )
    if not args.no_plots:
        write_timelines(cert)
    paths = cert_mod.write_outputs(args.out, cert, results)
    written = paths + [c[k] for c in cert["counterexamples"] for k in ("file", "timeline") if c.get(k)]
    out.record(written)
    console.print(cert_mod.markdown(cert), markup=False, highlight=False, soft_wrap=True)
    console.print(f"written: {', '.join(paths)}", markup=False, highlight=False)
    status = cert_mod.exit_status(cert)
    if status == cert_mod.EXIT_ERROR:
        console.print(
            f"[red]certify: {len(cert['errors'])} workloads ended in an engine error and "
            f"{len(cert['skipped'])} were skipped: the certificate is incomplete (exit 3)"
        )
    return status


class CampaignProgress:
    """A live bar in a terminal; in a CI log, where a bar is invisible, one plain line per tenth of the run."""

    def __init__(self, console: Console, total: int, what: str) -> None:
        self.console, self.total, self.what = console, total, what
        self.n = self.failed = self.errors = 0
        self.every = max(1, total // 10)
        self.t0 = time.perf_counter()
        self.bar = (
            Progress(
                TextColumn("certify {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[failures]} failed, {task.fields[errors]} errors"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            if console.is_terminal
            else None
        )

    def __enter__(self) -> CampaignProgress:
        if self.bar is not None:
            self.bar.__enter__()
            self.task = self.bar.add_task(self.what, total=self.total, failures=0, errors=0)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def done(self, result: WorkloadResult) -> None:
        self.n += 1
        self.errors += bool(result.error or result.skipped)
        self.failed += bool(result.failed) and not (result.error or result.skipped)
        if self.bar is not None:
            self.bar.update(self.task, advance=1, failures=self.failed, errors=self.errors)
        elif self.n % self.every == 0 or self.n == self.total:
            print(
                f"certify {self.what}: {self.n}/{self.total} workloads, {self.failed} failed, {self.errors} errors, "
                f"{time.perf_counter() - self.t0:.0f} s",
                file=sys.stderr,
                flush=True,
            )


def cmd_replay(args: argparse.Namespace, console: Console) -> int:
    from .spec.jsonio import read_json

    data = read_json(args.file)
    if isinstance(data, dict) and data.get("kind") == "state":  # a proof's counterexample: one step from a state
        from .proofs.runs.report import load_state_counterexample, replay_state

        broken, shown = replay_state(load_state_counterexample(args.file))
        for item in shown:
            console.print(item)
        return 1 if broken else 0
    cx = Counterexample.load(args.file)
    engine_b = vllm_source_engine(args.vllm_source) if args.vllm_source else (args.engine or cx.engine_b)
    from .outdir import check_output_file

    check_output_file(args.plot, args.force, "--plot")
    result = diff(
        cx.workload,
        engine_factory(cx.engine_a),
        engine_factory(engine_b),
        cx.level,
        keep_records=True,
        names=(cx.engine_a, engine_b),
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
    if engine_b != cx.engine_b:
        console.print(f"  replaying b as {engine_b}", markup=False, highlight=False)
    if d is None:
        console.print(f"[green]no divergence: {cx.engine_a} and {engine_b} agree on all {result.steps_compared} steps")
    else:
        console.print(
            rich_side_by_side(side_by_side(result.records_a, result.records_b, d, args.window), cx.engine_a, engine_b)
        )
        console.print(
            f"diverges at step {d.step}: {d.field}: a={d.a!r} b={d.b!r}", style="red", markup=False, highlight=False
        )
    from .spec.invariants import check_trace

    violations = check_trace(Trace(cx.workload, tuple(_whole_run(cx.workload, engine_b)), engine_b, "max_steps"))
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


def rich_side_by_side(table: dict[str, Any], name_a: str, name_b: str) -> Table:
    """`explain.side_by_side` for a terminal: the diverging row bold, the diverging cells red."""
    out = Table(title=f"diverges at step {table['step']} on {table['field']}")
    tokens_is_field = table["field"] == "output.num_scheduled_tokens"
    cols = ["step", f"scheduled (a: {name_a})", f"scheduled (b: {name_b})", "preempted a / b"]
    cols += [] if tokens_is_field else [f"{table['field']} (a)", f"{table['field']} (b)"]
    for col in cols:
        out.add_column(escape(col))
    for r in table["rows"]:
        red = (lambda x: f"[red]{escape(x)}[/]") if r["diverges"] else escape
        cells = [
            escape(f"{r['step']} <-" if r["diverges"] else str(r["step"])),
            (red if tokens_is_field else escape)(r["tokens_a"]),
            (red if tokens_is_field else escape)(r["tokens_b"]),
            escape(r["preempted"]),
        ]
        cells += [] if tokens_is_field else [red(r["field_a"]), red(r["field_b"])]
        out.add_row(*cells, style="bold" if r["diverges"] else None)
    return out


def _whole_run(workload: Workload, name: str) -> list[StepRecord]:
    """An engine's whole run on its own, through the differ's timeouts and crash handling (one engine, not two)."""
    return diff(workload, None, engine_factory(name), "blocks", keep_records=True, names=(name, name)).records_b


def plot_pair(cx: Counterexample, engine_b: str, path: str, mark_step: int | None) -> None:
    """Both engines' whole runs as timeline panels, one above the other, the divergence marked with its field."""
    from .plot import plot_timelines

    w = cx.workload
    if mark_step is not None:  # shrinking cuts max_steps down to the divergence: let both runs go on past it
        w = w.replace(max_steps=max(w.max_steps, mark_step + 30))
    traces = [Trace(w, tuple(_whole_run(w, name)), name) for name in (cx.engine_a, engine_b)]
    label = divergence_label(cx.divergence) if mark_step is not None else None
    plot_timelines(traces, path, [f"{cx.engine_a} (a)", f"{engine_b} (b)"], mark_step, label)


def divergence_label(d: dict[str, Any]) -> str:
    """The field that differs and how, short enough for a picture: for per-request values, only the
    requests whose values differ (`output.num_scheduled_tokens: r5 20 (a) vs 21 (b)`)."""
    a: Any = d.get("a")
    b: Any = d.get("b")
    if _pairs(a) and _pairs(b):
        da, db = {str(k): v for k, v in a}, {str(k): v for k, v in b}
        keys = [k for k in dict.fromkeys([*da, *db]) if da.get(k) != db.get(k)]
        what = "; ".join(f"{k} {da.get(k, '-')} (a) vs {db.get(k, '-')} (b)" for k in keys[:3])
        what += f"; +{len(keys) - 3} more" if len(keys) > 3 else ""
    else:
        what = f"{a} (a) vs {b} (b)"
    what = what if len(what) <= 70 else what[:67] + "..."
    return f"{d.get('field')}: {what}"


def _pairs(v: Any) -> bool:
    """Per-request values as the differ reports them: a list of (request id, value) pairs."""
    return isinstance(v, list) and all(isinstance(x, list | tuple) and len(x) == 2 for x in v)


def write_timelines(cert: dict[str, Any], limit: int = TIMELINES) -> None:
    """A PNG beside each of the first `limit` counterexample files; its path goes into the certificate.

    An engine that crashed or hung has no timeline worth re-running it for.
    A picture that cannot be drawn is noted, never allowed to cost the certificate.
    """
    drawable = [
        c
        for c in cert["counterexamples"]
        if c.get("file") and c.get("shrunk") and not c["shrunk"]["field"].startswith(("engine", "malformed"))
    ]
    for c in drawable[:limit]:
        png = os.path.splitext(c["file"])[0] + ".png"
        try:
            plot_pair(Counterexample.load(c["file"]), cert["engine"], png, c["shrunk"]["step"])
            c["timeline"] = png
        except Exception as e:  # noqa: BLE001
            c["timeline_error"] = f"{type(e).__name__}: {e}"


def add_parsers(sub: Subcommands) -> None:
    p = sub.add_parser(
        "certify", help="run a campaign of generated workloads against the oracle and write a certificate"
    )
    p.add_argument(
        "--engine",
        required=True,
        help="reference, vllm (vLLM 0.33.0), vllm==VERSION (a vLLM release 0.28.0-0.33.0, its venv built on "
        "first use), torch, or module:callable",
    )
    p.add_argument("--against", default="reference", help="the oracle engine (default: reference)")
    p.add_argument(
        "--level",
        default="blocks",
        choices=["tokens", "lifecycle", "blocks"],
        help="what must agree: the tokens granted; also the requests' lifecycles and queues; also the block ids",
    )
    p.add_argument("--family", action="append", help="a workload family (repeatable; default: all)")
    p.add_argument("--workloads", type=int, default=100, help="how many workloads (default: 100)")
    p.add_argument("--seed", type=int, default=0, help="campaign seed (default: 0)")
    p.add_argument("--shard", default="0/1", help="i/n: run every n-th workload starting at i (default: 0/1)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default: 1)")
    p.add_argument("--out", default="certificate", help="folder for the certificate, JUnit XML and counterexamples")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace the outputs of an earlier run in --out (they are removed first) and any file of the same name",
    )
    p.add_argument(
        "--vllm-source",
        metavar="PATH",
        help="with --engine vllm: run the vLLM source tree at PATH "
        "(a checkout holding vllm/) on the pinned venv's dependencies",
    )
    p.add_argument(
        "--vllm-version",
        metavar="V",
        help="with --vllm-source: the vLLM release the tree is judged as (default: read from its vllm/_version.py, "
        "vllm/version.py or PKG-INFO, else 0.33.0)",
    )
    p.add_argument(
        "--allow-divergence",
        action="store_true",
        help="list departures of values from the oracle instead of failing; crashes, broken invariants, "
        "nondeterminism and engine errors still fail",
    )
    g = p.add_argument_group("engine failures and budgets")
    g.add_argument(
        "--step-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds one engine call may take before the workload is an error (default: 30)",
    )
    g.add_argument(
        "--start-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds an engine may take to start, and its factory to build it; retried once (default: 300)",
    )
    iso = g.add_mutually_exclusive_group()
    iso.add_argument(
        "--isolate",
        dest="isolate",
        action="store_true",
        default=None,
        help="run the engine in its own process (the default for module:callable)",
    )
    iso.add_argument(
        "--in-process",
        dest="isolate",
        action="store_false",
        help="run a module:callable engine in the harness's process (faster; an os._exit kills the run)",
    )
    g.add_argument(
        "--shrink-budget",
        type=int,
        default=400,
        metavar="N",
        help="candidate workloads tried when shrinking one divergence; 0 skips shrinking (default: 400)",
    )
    g.add_argument(
        "--max-counterexamples",
        type=int,
        default=10,
        metavar="K",
        help="divergences shrunk and drawn; the rest are listed unshrunk (default: 10)",
    )
    g.add_argument(
        "--max-errors",
        type=int,
        default=5,
        metavar="N",
        help="after this many engine errors the remaining workloads are skipped (default: 5)",
    )
    g.add_argument("--no-plots", action="store_true", help="draw no timeline PNGs")
    p.set_defaults(func=cmd_certify)

    p = sub.add_parser("replay", help="replay a counterexample on two engines, side by side")
    p.add_argument("file")
    p.add_argument("--engine", help="replay against this engine instead of the recorded one")
    p.add_argument("--vllm-source", metavar="PATH", help="replay engine b as vLLM from this source tree")
    p.add_argument("--window", type=int, default=WINDOW, help="steps shown before the divergence")
    p.add_argument(
        "--plot", metavar="TIMELINE.png", help="draw both runs' timelines here, one above the other on the same scales"
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing --plot file")
    p.set_defaults(func=cmd_replay)


def cmd_check(args: argparse.Namespace, console: Console) -> int:
    """The monitors judge each step; the consistency rules judge whether the steps follow from one another.

    A trace cut, spliced or edited by hand can pass every monitor, so both run,
    each as its own rows of the table, and either kind of violation fails.
    Both run in one pass over the steps as the file is read (`onepass.check_all`): memory is one step's, not the run's.
    """
    from .spec.invariants import MONITORED
    from .spec.invariants.consistency import RULES
    from .spec.invariants.onepass import check_all
    from .spec.trace_stream import KeysAfterSteps, open_trace

    trace = open_trace(args.trace)
    try:
        checked = check_all(trace, on_step=_check_progress(trace))
    except KeysAfterSteps:  # a key after "steps" may override the head: only a whole load reads it right
        trace = Trace.load(args.trace)
        checked = check_all(trace, on_step=_check_progress(trace))
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


def _check_progress(trace: Trace | StreamedTrace, every: int = 1000) -> Callable[[int], None]:
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
