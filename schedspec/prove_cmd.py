"""`schedspec prove`: the invariant catalogue, proved inductive for every N up to a bound."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time

from rich.console import Console
from rich.table import Table

from .spec.errors import SpecError
from .spec.invariants import BY_NAME, INVARIANTS

MARK = {"proved": "[green]proved", "violated": "[red]VIOLATED", "unknown": "[yellow]unknown",
        "unconfirmed": "[magenta]unconfirmed", "n/a": "[dim]n/a"}


def cmd_prove(args: argparse.Namespace, console: Console) -> int:
    from .proofs.report import write_state_counterexample

    if args.feature:  # feature mode (proofs/features.py): its own encoding, N <= 4 by default
        from .proofs.features import jobs as feature_jobs, run_job
        jobs = lambda *a: feature_jobs(*a, features=tuple(dict.fromkeys(args.feature)))  # noqa: E731
    else:
        from .proofs.prove import jobs, run_job
    if args.max_requests is None:
        args.max_requests = 4 if args.feature else 8

    names = args.invariant or [i.name for i in INVARIANTS]
    for name in names:
        if name not in BY_NAME:
            raise SpecError("--invariant", name, "is not an invariant of the catalogue")
    if args.mutant:
        from .conformance.mutants import BY_NAME as MUTANTS

        if args.mutant not in MUTANTS:
            raise SpecError("--mutant", args.mutant, f"must be one of {', '.join(MUTANTS)}")
    if args.max_requests < 1:
        raise SpecError("--max-requests", args.max_requests, "must be >= 1")
    todo = jobs(args.max_requests, names, args.policy or ["fcfs", "priority"], args.timeout, args.mutant)
    t0 = time.perf_counter()
    if args.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            results = pool.map(run_job, todo, chunksize=1)
    else:
        results = [run_job(j) for j in todo]
    elapsed = time.perf_counter() - t0

    for policy in dict.fromkeys(r.policy for r in results):
        table = Table(title=f"{policy.upper()}: each invariant inductive for N live requests"
                            + (f" with {', '.join(args.feature)}" if args.feature else "")
                            + (f" (mutant {args.mutant})" if args.mutant else ""))
        table.add_column("invariant")
        ns = sorted({r.n for r in results})
        for n in ns:
            table.add_column(f"N={n}", justify="right")
        for name in names:
            row = {r.n: r for r in results if r.policy == policy and r.invariant == name}
            table.add_row(name, *[f"{MARK[row[n].verdict]} {row[n].seconds:.2f}s" for n in ns])
        mine = [r for r in results if r.policy == policy]
        table.add_row("[bold]sum (CPU)", *[f"{sum(r.seconds for r in mine if r.n == n):.1f}s "
                                             f"({sum(r.cpu_seconds for r in mine if r.n == n):.1f}s)" for n in ns])
        console.print(table)
    bad = [r for r in results if r.verdict in ("violated", "unconfirmed")]
    for r in bad:
        path = os.path.join(args.out, f"proof-{r.policy}-{r.invariant}-N{r.n}.json")
        write_state_counterexample(path, r.invariant, r.n, r.policy, r.state, r.sampled, args.mutant)
        console.print(f"[red]{r.verdict}: {r.invariant} at N={r.n} ({r.policy}): {r.counterexample}; written to {path}")
    counts = {v: sum(1 for r in results if r.verdict == v) for v in MARK}
    console.print(f"{len(results)} checks in {elapsed:.1f} s wall, {sum(r.cpu_seconds for r in results):.1f} s CPU: "
                  + ", ".join(f"{n} {v}" for v, n in counts.items()))
    return 1 if bad else 0


def add_prove_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prove", help="prove the invariants inductive with Z3 for up to N requests")
    p.add_argument("--max-requests", type=int, default=None,
                   help="prove for every N from 1 to this (default 8; 4 with --feature)")
    p.add_argument("--invariant", action="append", help="only this invariant (repeatable)")
    p.add_argument("--policy", action="append", choices=["fcfs", "priority"], help="only this policy (repeatable)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per check; past it the verdict is unknown")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--mutant", help="plant this mutant (conformance/mutants.py) in the reference and the encoding")
    p.add_argument("--feature", action="append", choices=["spec-decode", "prefix-caching", "async"],
                   help="put this feature of issue 7 in the step (proofs/features.py); repeatable")
    p.add_argument("--out", default="proof-counterexamples", help="folder for counterexample files")
    p.set_defaults(func=cmd_prove)
