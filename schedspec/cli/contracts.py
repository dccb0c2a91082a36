"""`schedspec contracts`: CrossHair on the reference's contracts, one verdict per contract.

The verdicts are the runner's, never rounded up: "no counterexample within
bounds" only when CrossHair explored every path; "unknown" when its time ran
out first (the usual case: the bounded space is far larger than a run can
cover, so "unknown" means "searched N scenarios, found nothing"); and
"counterexample" only after the scenario was replayed concretely and broke
again; "error" when a worker crashed or hung and was killed, so the contract
was not checked at all (never a pass; the run goes on with a fresh worker).
The exit status is 1 if any contract has a confirmed counterexample,
2 for bad input (an unknown contract or mutant, a bad timeout, an `--out`
that cannot be written or holds an earlier run's results without `--force`),
0 otherwise.
"""

from __future__ import annotations

import argparse
import threading
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from ..outdir import OutDir
from .argparsing import Subcommands
from .run_options import MAX_SECONDS, MIN_SECONDS, check_jobs, check_seconds, progress

if TYPE_CHECKING:
    from ..proofs.crosshair.runner import ContractResult


_STYLE = {
    "counterexample": "red",
    "unconfirmed": "yellow",
    "unknown": "yellow",
    "error": "magenta",
    "no counterexample within bounds": "green",
}


def _describe(replay: dict[str, Any] | None) -> str:
    """The decoded scenario, in one line a person can read beside the step it broke at."""
    if not replay:
        return ""
    w = replay["workload"]
    c = w["config"]
    reqs = "; ".join(
        f"{r['request_id']}: prompt {len(r['prompt_token_ids'])}, max {r['max_tokens']}"
        + (f", min {r['min_tokens']}" if r["min_tokens"] else "")
        + (f", pri {r['priority']}" if c["policy"] == "priority" else "")
        + (f", at {r['arrival_step']}" if r["arrival_step"] else "")
        + (f", eos #{len(r['output_token_ids']) - 1}" if r["output_token_ids"] else "")
        for r in w["requests"]
    )
    aborts = "".join(f"; abort {a['request_id']} at {a['step']}" for a in w["aborts"])
    return (
        f"{c['policy']}, L {c['max_model_len']}, budget {c['max_num_batched_tokens']}, seqs {c['max_num_seqs']}, "
        f"block {c['block_size']}, gpu blocks {c['num_gpu_blocks']}"
        + (f", threshold {c['long_prefill_token_threshold']}" if c["long_prefill_token_threshold"] else "")
        + ("" if c["enable_chunked_prefill"] else ", no chunking")
        + f" | {reqs}{aborts}"
    )


def cmd_contracts(args: argparse.Namespace, console: Console) -> int:
    from ..proofs.crosshair.runner import CX, ERROR, UNKNOWN, check_mutant, check_names, run_contracts

    check_seconds("--timeout", args.timeout)
    check_jobs(args.jobs)
    names = check_names(args.contract)
    check_mutant(args.mutant)
    out = OutDir(args.out, args.force, "--out", "contracts") if args.out else None
    if out:  # before CrossHair runs: a bad folder is an error now, not after the search
        out.prepare(["results.json"], ["*.workload.json"])
    lock, done = threading.Lock(), []

    def on_done(r: ContractResult) -> None:  # called from the runner's threads
        with lock:
            done.append(r)
            cx, unknown = sum(x.verdict == CX for x in done), sum(x.verdict == UNKNOWN for x in done)
            errors = sum(x.verdict == ERROR for x in done)
            failed = f", {errors} error" if errors else ""
            progress(
                "contracts",
                f"{len(done)}/{len(names)} contracts done, {cx} with a counterexample, "
                f"{unknown} unknown{failed} ({r.contract}: {r.verdict}, {r.seconds:.1f} s, "
                f"{r.scenarios} scenarios)",
            )

    results = run_contracts(names, args.timeout, args.mutant, args.jobs, on_done=on_done)
    title = (
        f"CrossHair contracts on the reference{f' with mutant {args.mutant}' if args.mutant else ''}, "
        f"{args.timeout:g} CPU-s each"
    )
    table = Table(title=title)
    for col in ("contract", "verdict", "seconds", "scenarios", "counterexample"):
        table.add_column(col, overflow="fold")
    for r in results:
        cx = ""
        if r.replay and not r.replay["holds"]:
            at = f"step {r.replay['step']}: " if r.replay["step"] is not None else ""
            cx = f"{at}{r.replay['what']}: {r.replay['detail']}\n{_describe(r.replay)}"
        elif r.verdict != "no counterexample within bounds" and r.message:
            cx = r.message
        table.add_row(
            r.contract, f"[{_STYLE.get(r.verdict, 'white')}]{r.verdict}", f"{r.seconds:.1f}", str(r.scenarios), cx
        )
    console.print(table)
    confirmed = [r for r in results if r.verdict == CX]
    if out:
        from ..spec.jsonio import write_json_atomic

        written = [out.file("results.json")]
        write_json_atomic(
            written[0],
            {"timeout_cpu_s": args.timeout, "mutant": args.mutant, "results": [r.to_json() for r in results]},
        )
        for r in confirmed:  # each scenario as a workload file, so `schedspec simulate` can show it step by step
            assert r.replay is not None  # run_contract confirms a counterexample by its replay
            written.append(out.file(f"{r.contract}.workload.json"))
            write_json_atomic(written[-1], r.replay["workload"])
        out.record(written)
        console.print(
            f"results written to {out.final(written[0])}"
            + (", counterexample workloads beside it" if confirmed else "")
        )
    errors = [r.contract for r in results if r.verdict == ERROR]
    if errors:  # not checked at all: said apart from "unknown", which did search
        console.print(f"[magenta]{len(errors)} contract(s) not checked, their worker failed: {', '.join(errors)}")
    if confirmed:
        console.print(f"[red]{len(confirmed)} contract(s) with a confirmed counterexample")
    return 1 if confirmed else 0


def add_contracts_parser(sub: Subcommands) -> None:
    p = sub.add_parser("contracts", help="run CrossHair on the reference's contracts (bounded; see docs/crosshair.md)")
    p.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="S",
        help=f"CrossHair's budget per contract, in CPU seconds, {MIN_SECONDS:g} to {MAX_SECONDS:.0f} (default 30)",
    )
    p.add_argument(
        "--contract",
        action="append",
        metavar="NAME",
        help="a contract (check_token_bounds) or its check (token-bounds); repeatable; default: all",
    )
    p.add_argument("--mutant", metavar="NAME", help="plant this mutant of the reference first (mutants/)")
    p.add_argument("--jobs", type=int, default=1, help="contracts run side by side (default 1)")
    p.add_argument("--out", metavar="DIR", help="write results.json here, and each counterexample as a workload file")
    p.add_argument(
        "--force", action="store_true", help="replace an earlier run's results in --out (they are removed first)"
    )
    p.set_defaults(func=cmd_contracts)
