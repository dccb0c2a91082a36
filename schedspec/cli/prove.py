"""`schedspec prove`: the invariant catalogue, proved inductive for every N up to a bound.

Exit status: 0 when every check is `proved` (or `n/a`); 1 when any is
`violated` or `unconfirmed`, and when any is `unknown` (a Z3 timeout)
unless `--allow-unknown` says a partial proof is acceptable; 2 for bad
input. An `unknown` fails by default because a run that proved 431 of 432
checks has not proved the catalogue, and a CI job that goes green on it
would claim otherwise. The last line on stderr says why a run failed.

The counterexample folder is prepared before the first query: an `--out`
that is a file or cannot be written, or that holds an earlier run's
counterexamples (without `--force`), fails in a second, not after an hour
of proofs. A folder this run created and left empty is removed again, so a
clean run leaves nothing behind.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from ..outdir import OutDir
from ..render.step_table import add_name_column
from ..spec.errors import SpecError
from ..spec.invariants import DECISION_ROWS, DECISIONS, INVARIANTS, PROVABLE
from .argparsing import Subcommands
from .run_options import MAX_SECONDS, MIN_SECONDS, check_jobs, check_seconds, progress, worker_pool

if TYPE_CHECKING:
    from ..proofs.runs.prove import Job, Result

MARK = {
    "proved": "[green]proved",
    "violated": "[red]VIOLATED",
    "unknown": "[yellow]unknown",
    "unconfirmed": "[magenta]unconfirmed",
    "known": "[yellow]known",  # violated, replayed, and a known violation of this release (spec/versions.py)
    "n/a": "[dim]n/a",
}
FAILS = ("violated", "unconfirmed")  # unconfirmed: the encoding drifted from the reference, a bug in the proof
# The decision invariants' row forms are proved up to this N in the default run and under --decisions: every one
# is proved there in seconds, while admission-exact is unknown after 60 s from N = 4 (benchmarks/RESULTS.md).
DECISIONS_MAX_N = 3
DECISION_ROW_NAMES = [d.name for d in DECISION_ROWS]
# What the Z3 encoding cannot state, and why: it abstracts block ids and hashes to counts, and the deployment
# features are outside its scope (docs/proofs.md, docs/architecture.md's scope table).
_IDS = "about block ids and hashes, which the Z3 encoding abstracts to counts"
_SCOPE = {
    "grammar-wait-exact": "about a deployment feature, which is outside the Z3 encoding's scope",
    "lora-limit-exact": "about a deployment feature, which is outside the Z3 encoding's scope",
    "decode-cadence-exact": "about a deployment feature, which is outside the Z3 encoding's scope",
    "prefill-cadence-exact": "about a deployment feature, which is outside the Z3 encoding's scope",
    "controls-exact": "about the engine's calls outside schedule(), which are outside the Z3 encoding's scope",
    "pooling-exact": "about a deployment feature, which is outside the Z3 encoding's scope",
}
UNSTATED = {d.name: _SCOPE.get(d.name, _IDS) for d in DECISIONS if d.name not in DECISION_ROW_NAMES}


def _check_args(args: argparse.Namespace) -> list[str]:
    """Every argument, before anything is built or written; the invariants to prove."""
    if args.decisions and args.feature:
        raise SpecError("--feature", args.feature[0], "--decisions proves the core scope only")
    default = DECISION_ROW_NAMES if args.decisions else [i.name for i in INVARIANTS]
    names = list(dict.fromkeys(args.invariant or default))  # a repeated name runs once
    for name in names:
        if name in UNSTATED:
            raise SpecError("--invariant", name, f"is a decision invariant Z3 cannot state: it is {UNSTATED[name]}")
        if name not in PROVABLE:
            raise SpecError("--invariant", name, f"must be one of {', '.join(PROVABLE)}")
        if name in DECISION_ROW_NAMES and args.feature:
            raise SpecError("--invariant", name, "is a decision invariant, whose row form is of the core scope only")
    if args.mutant:
        from ..mutants import BY_NAME as MUTANTS

        if args.mutant not in MUTANTS:
            raise SpecError("--mutant", args.mutant, f"must be one of {', '.join(MUTANTS)}")
    if args.max_requests < 1:
        raise SpecError("--max-requests", args.max_requests, "must be >= 1")
    check_seconds("--timeout", args.timeout)
    check_jobs(args.jobs)
    from ..spec.versions import RELEASES

    if args.vllm_version not in RELEASES:
        raise SpecError("--vllm-version", args.vllm_version, f"must be one of {', '.join(RELEASES)}")
    return names


def _tally(results: list[Result]) -> str:
    counts = Counter(r.verdict for r in results)
    extra = f", {counts['unconfirmed']} unconfirmed" if counts["unconfirmed"] else ""
    return f"{counts['violated']} violated, {counts['unknown']} unknown{extra}"


def _run(todo: Sequence[Job], run_job: Callable[[Job], Result], jobs: int) -> list[Result]:
    """Every job, with a progress line per finished (policy, N) row and per check that is not proved.

    The jobs start in (policy, N) order, which keeps a worker's cached
    encoding useful (prove.encoded_step); the results are put back in that order."""
    left = Counter((j.fcfs, j.n) for j in todo)
    results: list[Result] = []
    t0 = time.perf_counter()
    with worker_pool(jobs) as pool:
        for r in pool.imap_unordered(run_job, todo, chunksize=1):
            results.append(r)
            row = (r.policy == "fcfs", r.n)
            left[row] -= 1
            done = f"{len(results)}/{len(todo)} checks done, {_tally(results)}"
            if r.verdict not in ("proved", "n/a"):
                progress("prove", f"{r.verdict}: {r.invariant} at N={r.n} ({r.policy}) after {r.seconds:.1f} s")
            if not left[row]:
                progress("prove", f"{r.policy} N={r.n} finished at {time.perf_counter() - t0:.1f} s; {done}")
    order = {(j.fcfs, j.n, j.invariant): i for i, j in enumerate(todo)}
    return sorted(results, key=lambda r: order[(r.policy == "fcfs", r.n, r.invariant)])


def cmd_prove(args: argparse.Namespace, console: Console) -> int:
    from ..proofs.runs.report import write_state_counterexample

    if args.every_n:
        from .prove_every_n import cmd_every_n

        if args.decisions:
            raise SpecError("--every-n", "--decisions", "the proofs for every N do not take the decision invariants")
        if args.max_requests is None:
            args.max_requests = 8  # unused by the proofs for every N; only so that _check_args checks the rest
        _check_args(args)
        return cmd_every_n(args, console)

    # A mode's jobs() and run_job() go together: feature mode's run_job takes only the feature Jobs its own jobs()
    # makes, a pairing the types cannot say when the mode is picked at run time (hence Any).
    jobs: Callable[[int, list[str], list[str], float, str | None], Sequence[Job]]
    run_job: Callable[[Any], Result]
    if args.feature:  # feature mode (proofs/runs/features.py): its own encoding, N <= 4 by default
        from ..proofs.runs.features import jobs as feature_jobs, run_job

        jobs = lambda n, invariants, policies, timeout_s, mutant: feature_jobs(  # noqa: E731
            n,
            invariants,
            policies,
            timeout_s,
            mutant,
            features=tuple(dict.fromkeys(args.feature)),
            release=args.vllm_version,
        )
    else:
        from ..proofs.runs.prove import jobs as core_jobs, run_job

        jobs = lambda n, invariants, policies, timeout_s, mutant: core_jobs(  # noqa: E731
            n, invariants, policies, timeout_s, mutant, release=args.vllm_version
        )
    # The default run (no bound given, no feature) also proves the decision invariants up to DECISIONS_MAX_N, and
    # ends with the proofs for every N: both take seconds.
    with_every_n = args.max_requests is None and not args.feature and not args.decisions
    with_decisions = with_every_n and not args.invariant
    if args.max_requests is None:
        args.max_requests = 4 if args.feature else DECISIONS_MAX_N if args.decisions else 8
    names = _check_args(args)
    created = not os.path.exists(args.out)
    out = OutDir(args.out, args.force, "--out", "prove")
    out.prepare(patterns=["proof-*.json"])
    policies = list(dict.fromkeys(args.policy or ["fcfs", "priority"]))
    todo = list(jobs(args.max_requests, names, policies, args.timeout, args.mutant))
    if with_decisions:
        todo += jobs(DECISIONS_MAX_N, DECISION_ROW_NAMES, policies, args.timeout, args.mutant)
        names += DECISION_ROW_NAMES
    todo.sort(key=lambda j: (not j.fcfs, j.n))  # (policy, N) order keeps each worker's encoding (prove.encoded_step)
    t0 = time.perf_counter()
    results = _run(todo, run_job, args.jobs)
    elapsed = time.perf_counter() - t0

    for policy in dict.fromkeys(r.policy for r in results):
        table = Table(
            title=f"{policy.upper()}: each invariant inductive for N live requests"
            + (f" at vLLM {args.vllm_version}" if args.vllm_version != "0.33.0" else "")
            + (f" with {', '.join(args.feature)}" if args.feature else "")
            + (f" (mutant {args.mutant})" if args.mutant else "")
        )
        add_name_column(table, "invariant", names)
        ns = sorted({r.n for r in results})
        for n in ns:
            table.add_column(f"N={n}", justify="right")
        for name in names:
            row = {r.n: r for r in results if r.policy == policy and r.invariant == name}
            table.add_row(name, *[f"{MARK[row[n].verdict]} {row[n].seconds:.2f}s" if n in row else "-" for n in ns])
        mine = [r for r in results if r.policy == policy]
        table.add_row(
            "[bold]sum (CPU)",
            *[
                f"{sum(r.seconds for r in mine if r.n == n):.1f}s ({sum(r.cpu_seconds for r in mine if r.n == n):.1f}s)"
                for n in ns
            ],
        )
        console.print(table)
    if any(n in DECISION_ROW_NAMES for n in names):
        why: dict[str, list[str]] = {}
        for name, reason in UNSTATED.items():
            why.setdefault(reason, []).append(name)
        for reason, unstated in why.items():
            console.print(f"[dim]{', '.join(unstated)}: n/a in Z3, each {reason}; the monitors check them.")
    bad = [r for r in results if r.verdict in FAILS]
    written = []
    for r in bad:
        written.append(out.file(f"proof-{r.policy}-{r.invariant}-N{r.n}.json"))
        write_state_counterexample(written[-1], r.invariant, r.n, r.policy, r.state, r.sampled, args.mutant)
        console.print(
            f"[red]{r.verdict}: {r.invariant} at N={r.n} ({r.policy}): {r.counterexample}; "
            f"written to {out.final(written[-1])}"
        )
    if written or not created:
        out.record(written)
    else:  # a clean run leaves no empty folder behind in the working directory
        out.abandon()
    counts = {v: sum(1 for r in results if r.verdict == v) for v in MARK}
    console.print(
        f"{len(results)} checks in {elapsed:.1f} s wall, {sum(r.cpu_seconds for r in results):.1f} s CPU: "
        + ", ".join(f"{n} {v}" for v, n in counts.items())
    )
    status = _verdict(counts, args.allow_unknown)
    if with_every_n:
        from ..proofs.runs.every_n import EVERY_N
        from .prove_every_n import failed, run_and_print

        chosen = [n for n in names if n in EVERY_N]
        if chosen and failed(run_and_print(chosen, policies, args, console), args.allow_unknown):
            progress("prove", "FAILED: a proof for every N did not go through (the table above says which)")
            status = 1
    return status


def _verdict(counts: dict[str, int], allow_unknown: bool) -> int:
    """The exit status, and the one line that says why a run failed (or what it accepted)."""
    why = [f"{counts[v]} check{'s' if counts[v] != 1 else ''} {v}" for v in FAILS if counts[v]]
    unknown = counts["unknown"]
    if unknown and not allow_unknown:
        why.append(
            f"{unknown} check{'s' if unknown != 1 else ''} unknown (Z3 timed out); "
            "pass --allow-unknown to accept them, or a larger --timeout to settle them"
        )
    if why:
        progress("prove", "FAILED: " + "; ".join(why))
        return 1
    if unknown:
        progress(
            "prove", f"passed, with {unknown} unknown check{'s' if unknown != 1 else ''} accepted (--allow-unknown)"
        )
    return 0


def add_prove_parser(sub: Subcommands) -> None:
    p = sub.add_parser("prove", help="prove the invariants inductive with Z3 for up to N requests")
    p.add_argument(
        "--max-requests", type=int, default=None, help="prove for every N from 1 to this (default 8; 4 with --feature)"
    )
    p.add_argument(
        "--every-n",
        action="store_true",
        help="prove for every number of requests, by a loop invariant over the step's events "
        "(proofs/runs/every_n.py, the invariants of its EVERY_N; core scope)",
    )
    p.add_argument(
        "--decisions",
        action="store_true",
        help="prove the decision invariants' row forms (spec/invariants/decision_rows.py; core scope) "
        f"instead of the catalogue, for N up to --max-requests (default {DECISIONS_MAX_N})",
    )
    p.add_argument("--invariant", action="append", help="only this invariant (repeatable)")
    p.add_argument("--policy", action="append", choices=["fcfs", "priority"], help="only this policy (repeatable)")
    p.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="S",
        help=f"seconds per check, {MIN_SECONDS:g} to {MAX_SECONDS:.0f} (default 30); past it the verdict is unknown",
    )
    p.add_argument(
        "--allow-unknown",
        action="store_true",
        help="exit 0 even if some checks are unknown (timed out); violated ones still fail",
    )
    p.add_argument(
        "--vllm-version",
        default="0.33.0",
        metavar="V",
        help="the vLLM release whose rules are proved, 0.28.0 to 0.33.0 (docs/versions.md; default 0.33.0)",
    )
    p.add_argument("--jobs", type=int, default=1, help="checks run side by side (default 1)")
    p.add_argument("--mutant", help="plant this mutant (mutants/) in the reference and the encoding")
    p.add_argument(
        "--feature",
        action="append",
        choices=["spec-decode", "prefix-caching", "async"],
        help="put this feature (prefix caching, spec decode or async scheduling) in the step "
        "(proofs/runs/features.py); repeatable",
    )
    p.add_argument(
        "--out",
        default="proof-counterexamples",
        metavar="DIR",
        help="folder for counterexample files (proof-*.json), written only when a check fails",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace an earlier run's counterexamples in --out (they are removed first)",
    )
    p.set_defaults(func=cmd_prove)
