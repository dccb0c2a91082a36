"""`schedspec certify`: a campaign of generated workloads against the oracle, as a person drives it.

The campaign itself is `conformance/campaign/certify.py`; this module parses
the options, shows progress (a bar in a terminal, a line per tenth in a CI
log), draws the first counterexamples' timelines
(`render/counterexample_timelines.py`) and prints the certificate.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..conformance.campaign import certify as cert_mod
from ..conformance.campaign.task import WorkloadResult
from ..conformance.engines.engine_spec import parse_engine
from ..conformance.engines.registry import certify_engine
from ..render.counterexample_timelines import write_timelines
from ..spec.jsonio import read_json
from .argparsing import Subcommands


def cmd_certify(args: argparse.Namespace, console: Console) -> int:
    from ..outdir import OutDir

    # Parsed once, here: the library takes the typed values.
    shard = cert_mod.parse_shard(args.shard)
    engine = certify_engine(parse_engine(args.engine, "--engine"), args.vllm_source, args.vllm_version)
    against = parse_engine(args.against, "--against")
    options = cert_mod.Options(
        jobs=args.jobs,
        step_timeout_s=args.step_timeout,
        start_timeout_s=args.start_timeout,
        isolate=args.isolate,
        shrink_budget=args.shrink_budget,
        max_counterexamples=args.max_counterexamples,
        max_errors=args.max_errors,
    )
    out = OutDir(args.out, args.force, "--out", "certify")  # the run writes under out.dir until it is recorded
    tasks = cert_mod.plan(
        engine,
        against,
        args.level,
        args.family or list(cert_mod.FAMILIES),
        args.workloads,
        args.seed,
        shard,
        out.dir,
        options,
        requested=bool(args.family),
    )
    out.prepare(cert_mod.OUTPUT_NAMES, cert_mod.OUTPUT_PATTERNS)
    progress = CampaignProgress(console, len(tasks), f"{engine} vs {against}")
    with progress:  # an interrupt: cli.main puts --out back as it was (outdir.abandon_unfinished)
        cert, results = cert_mod.certify(
            engine,
            against,
            tasks=tasks,
            options=options,
            shard=shard,
            workloads=args.workloads,
            out_dir=out.dir,
            on_done=progress.done,
            allow_divergence=args.allow_divergence,
        )
    if not args.no_plots:
        write_timelines(cert)
    paths = cert_mod.write_outputs(out.dir, cert, results)
    out.record(paths)
    paths = [out.final(p) for p in paths]
    cert = read_json(paths[0])  # as recorded: its counterexamples named where they now are
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
        self.n = self.failed = self.errors = self.skipped = 0
        self.every = max(1, total // 10)
        self.t0 = time.perf_counter()
        self.bar = (
            Progress(
                TextColumn("certify {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[tally]}"),
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
            self.task = self.bar.add_task(self.what, total=self.total, tally=self.tally())
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def tally(self) -> str:
        """The counts as the certificate words them: an error and a skip are told apart, as its outcomes are."""
        return f"{self.failed} failed, {self.errors} errors, {self.skipped} skipped"

    def done(self, result: WorkloadResult) -> None:
        self.n += 1
        self.errors += bool(result.error)
        self.skipped += bool(result.skipped) and not result.error
        self.failed += bool(result.failed) and not (result.error or result.skipped)
        if self.bar is not None:
            self.bar.update(self.task, advance=1, tally=self.tally())
        elif self.n % self.every == 0 or self.n == self.total:
            print(
                f"certify {self.what}: {self.n}/{self.total} workloads, {self.tally()}, "
                f"{time.perf_counter() - self.t0:.0f} s",
                file=sys.stderr,
                flush=True,
            )


def add_certify_parser(sub: Subcommands) -> None:
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
