"""`schedspec contracts`: CrossHair on the reference's contracts, one verdict per contract.

The verdicts are the runner's, never rounded up: "no counterexample within
bounds" only when CrossHair explored every path; "unknown" when its time ran
out first (the usual case: the bounded space is far larger than a run can
cover, so "unknown" means "searched N scenarios, found nothing"); and
"counterexample" only after the scenario was replayed concretely and broke
again. The exit status is 1 if any contract has a confirmed counterexample,
2 for bad input (an unknown contract or mutant, a bad timeout), 0 otherwise.
"""

from __future__ import annotations

import argparse
import os

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .spec.errors import SpecError

_STYLE = {"counterexample": "red", "unconfirmed": "yellow", "unknown": "yellow",
          "no counterexample within bounds": "green"}


def _describe(replay: dict | None) -> str:
    """The decoded scenario, in one line a person can read beside the step it broke at."""
    if not replay:
        return ""
    w = replay["workload"]
    c = w["config"]
    reqs = "; ".join(
        f"{r['request_id']}: prompt {len(r['prompt_token_ids'])}, max {r['max_tokens']}"
        + (f", min {r['min_tokens']}" if r["min_tokens"] else "") + (f", pri {r['priority']}" if c["policy"] == "priority" else "")
        + (f", at {r['arrival_step']}" if r["arrival_step"] else "") + (f", eos #{len(r['output_token_ids']) - 1}" if r["output_token_ids"] else "")
        for r in w["requests"])
    aborts = "".join(f"; abort {a['request_id']} at {a['step']}" for a in w["aborts"])
    return (f"{c['policy']}, L {c['max_model_len']}, budget {c['max_num_batched_tokens']}, seqs {c['max_num_seqs']}, "
            f"block {c['block_size']}, gpu blocks {c['num_gpu_blocks']}"
            + (f", threshold {c['long_prefill_token_threshold']}" if c["long_prefill_token_threshold"] else "")
            + ("" if c["enable_chunked_prefill"] else ", no chunking") + f" | {reqs}{aborts}")


def cmd_contracts(args: argparse.Namespace, console: Console) -> int:
    from .proofs.crosshair_runner import CX, check_mutant, check_names, run_contracts

    if args.timeout <= 0:
        raise SpecError("--timeout", args.timeout, "must be > 0 seconds")
    if args.jobs < 1:
        raise SpecError("--jobs", args.jobs, "must be >= 1")
    names = check_names(args.contract)
    check_mutant(args.mutant)
    if args.out and os.path.exists(os.path.join(args.out, "results.json")) and not args.force:
        raise SpecError("--out", args.out, "already holds results.json; pass --force to replace it")
    with Progress(TextColumn("crosshair {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        bar = progress.add_task(args.mutant or "reference", total=len(names))
        results = run_contracts(names, args.timeout, args.mutant, args.jobs,
                                on_done=lambda r: progress.update(bar, advance=1))
    title = (f"CrossHair contracts on the reference{f' with mutant {args.mutant}' if args.mutant else ''}, "
             f"{args.timeout:g} CPU-s each")
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
        table.add_row(r.contract, f"[{_STYLE.get(r.verdict, 'white')}]{r.verdict}", f"{r.seconds:.1f}",
                      str(r.scenarios), cx)
    console.print(table)
    confirmed = [r for r in results if r.verdict == CX]
    if args.out:
        from .spec.jsonio import write_json_atomic

        os.makedirs(args.out, exist_ok=True)
        write_json_atomic(os.path.join(args.out, "results.json"), {
            "timeout_cpu_s": args.timeout, "mutant": args.mutant, "results": [r.to_json() for r in results]})
        for r in confirmed:  # each scenario as a workload file, so `schedspec simulate` can show it step by step
            write_json_atomic(os.path.join(args.out, f"{r.contract}.workload.json"), r.replay["workload"])
        console.print(f"results written to {args.out}/results.json"
                      + (", counterexample workloads beside it" if confirmed else ""))
    if confirmed:
        console.print(f"[red]{len(confirmed)} contract(s) with a confirmed counterexample")
    return 1 if confirmed else 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("contracts", help="run CrossHair on the reference's contracts (bounded; see docs/crosshair.md)")
    p.add_argument("--timeout", type=float, default=30.0, metavar="S",
                   help="CrossHair's budget per contract, in CPU seconds (default 30)")
    p.add_argument("--contract", action="append", metavar="NAME",
                   help="a contract (check_token_bounds) or its check (token-bounds); repeatable; default: all")
    p.add_argument("--mutant", metavar="NAME", help="plant this mutant of the reference first (conformance/mutants.py)")
    p.add_argument("--jobs", type=int, default=1, help="contracts run side by side (default 1)")
    p.add_argument("--out", metavar="DIR", help="write results.json here, and each counterexample as a workload file")
    p.add_argument("--force", action="store_true", help="replace the results already in --out")
    p.set_defaults(func=cmd_contracts)
