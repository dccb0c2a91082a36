"""`schedspec prove --every-n`: the invariants of `proofs/runs/every_n.py`, proved for any number of requests.

Each cell is one invariant under one policy: `proved` (every lemma unsat and
none vacuous), `violated` (a lemma failed and the bounded proof found a real
counterexample at small N, replayed on the reference and written to --out),
`unknown` (Z3 gave up, or a counterexample to induction with no real
counterexample behind it), or `error` (a lemma's hypotheses admit no state).
A victim invariant of one policy is `n/a` under the other. Exit status as
`schedspec prove`: 0 when every cell is proved or n/a (or, with
--allow-unknown, unknown), 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

from rich.console import Console
from rich.table import Table

from ..outdir import OutDir
from ..proofs.runs.every_n import EveryN
from ..render.step_table import add_name_column
from ..spec.errors import SpecError

MARK = {
    "proved": "[green]proved",
    "violated": "[red]VIOLATED",
    "unconfirmed": "[magenta]unconfirmed",
    "unknown": "[yellow]unknown",
    "error": "[red]error",
    "n/a": "[dim]n/a",
}


def run_and_print(names: list[str], policies: list[str], args: argparse.Namespace, console: Console) -> list[EveryN]:
    """The proofs for every N of `names`, under `args.mutant` if any, printed as one table."""
    from ..proofs.runs.every_n import run

    if args.mutant:  # checked by cli/prove.py (its option checks) before anything is written
        from ..mutants import BY_NAME as MUTANTS, applied

        planted: contextlib.AbstractContextManager[object] = applied(MUTANTS[args.mutant])
    else:
        planted = contextlib.nullcontext()
    t0 = time.perf_counter()
    with planted:
        results = run(names, policies, args.timeout, args.vllm_version)
    table = Table(
        title="Each invariant proved for every number of requests (proofs/runs/every_n.py)"
        + (f" at vLLM {args.vllm_version}" if args.vllm_version != "0.33.0" else "")
        + (f" (mutant {args.mutant})" if args.mutant else "")
    )
    add_name_column(table, "invariant", [r.invariant for r in results])
    for col in ("policy", "verdict", "time", "queries", "detail"):
        table.add_column(col, justify="right" if col in ("time", "queries") else "left")
    for r in results:
        table.add_row(r.invariant, r.policy, MARK[r.verdict], f"{r.seconds:.2f}s", str(r.queries), r.detail)
    console.print(table)
    counts = {v: sum(1 for r in results if r.verdict == v) for v in MARK}
    console.print(
        f"{len(results)} cells for every N in {time.perf_counter() - t0:.1f} s: "
        + ", ".join(f"{n} {v}" for v, n in counts.items())
    )
    return results


def failed(results: list[EveryN], allow_unknown: bool) -> bool:
    bad = sum(1 for r in results if r.verdict in ("violated", "unconfirmed", "error"))
    return bool(bad or (not allow_unknown and any(r.verdict == "unknown" for r in results)))


def cmd_every_n(args: argparse.Namespace, console: Console) -> int:
    from ..proofs.runs.every_n import EVERY_N
    from ..proofs.runs.report import write_state_counterexample

    names = list(dict.fromkeys(args.invariant or EVERY_N))
    for name in names:
        if name not in EVERY_N:
            raise SpecError("--invariant", name, f"has no proof for every N yet; those that do: {', '.join(EVERY_N)}")
    if args.feature:
        raise SpecError("--feature", args.feature[0], "the proofs for every N are of the core scope only")
    policies = list(dict.fromkeys(args.policy or ["fcfs", "priority"]))
    created = not os.path.exists(args.out)
    out = OutDir(args.out, args.force, "--out", "prove")
    out.prepare(patterns=["proof-*.json"])
    results = run_and_print(names, policies, args, console)
    written = []
    for r in results:
        cx = r.counterexample
        if cx is not None and r.verdict in ("violated", "unconfirmed"):
            written.append(out.file(f"proof-{r.policy}-{r.invariant}-N{cx.n}.json"))
            write_state_counterexample(written[-1], r.invariant, cx.n, r.policy, cx.state, cx.sampled, args.mutant)
            console.print(
                f"[red]{r.verdict}: {r.invariant} ({r.policy}) at N={cx.n}; written to {out.final(written[-1])}"
            )
    if written or not created:
        out.record(written)
    else:  # a clean run leaves no empty folder behind in the working directory
        out.abandon()
    return 1 if failed(results, args.allow_unknown) else 0
