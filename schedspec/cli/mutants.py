"""`schedspec mutants`: the bug zoo as mutants, every checker's score, a table and a heatmap.

Exit status: 0 when every mutant is killed by some checker (or argued
equivalent in `mutants.EQUIVALENT`); 1 when one is not; 2 for bad input,
including an `--out` that cannot be written or that holds an earlier run's
tables without `--force` (checked before the first cell runs).

A mutant that no checker killed is reported in one of three ways, because
they call for different fixes: "survived every checker" when each checker
used up its count (`--examples`, Z3's `--rlimit`) and missed it (a hole in
the checkers, or a count too small); "not killed, budget spent" when a
cell was cut short by the `--budget` safety cap or a Z3 query hit its
resource limit (`Kill.verdict` "unknown"); "a checker failed" when one
crashed. None of them passes, and none is drawn as a survivor in the
tables: "—" marks only a checker that used up its count. Counts, not
seconds, decide every verdict (`kill_matrix.Budget`), so the table is the
same on a quiet machine and a loaded one (`benchmarks/RESULTS.md`).

`--from MODULE` scores your own mutants instead of the catalogue's: the
engines a module lists in `ENGINES` (`conformance/search/user_mutants.py`), by the
checkers that take an engine (monitors, diff, hypothesis).
"""

from __future__ import annotations

import argparse
import difflib
import statistics

from rich.console import Console

from ..conformance.search.budget import DEFAULT_CAP_S, DEFAULT_EXAMPLES, DEFAULT_Z3_RLIMIT
from ..kill_matrix import (
    CHECKERS,
    ENGINE_CHECKERS,
    Budget,
    Cell,
    Kill,
    Roster,
    catalogue_roster,
    module_roster,
    run_cell,
)
from ..mutants import BY_NAME, EQUIVALENT, MutantDrift, canonical_source, resolve, rewrite
from ..outdir import OutDir
from ..render.kill_tables import heatmap_png, kills_table, markdown_table
from ..spec.errors import SpecError
from ..spec.jsonio import write_bytes_atomic, write_json_atomic
from .argparsing import Subcommands
from .run_options import MAX_SECONDS, MIN_SECONDS, check_jobs, check_seconds, progress, worker_pool

OUTPUTS = ("mutants.json", "mutants.md", "mutants.png")


MAX_EXAMPLES = 10_000_000


MAX_RLIMIT = 2**62  # Z3 reads an unsigned 64-bit count


def _check_args(args: argparse.Namespace) -> tuple[list[str], list[str], Roster, Budget]:
    check_seconds("--budget", args.budget)
    check_jobs(args.jobs)
    if not 1 <= args.examples <= MAX_EXAMPLES:
        raise SpecError("--examples", args.examples, f"must be from 1 to {MAX_EXAMPLES}")
    if not 1 <= args.rlimit <= MAX_RLIMIT:
        raise SpecError("--rlimit", args.rlimit, f"must be from 1 to {MAX_RLIMIT} (Z3 work units per query)")
    roster = module_roster(args.source) if args.source else catalogue_roster()
    allowed = ENGINE_CHECKERS if args.source else CHECKERS
    checkers = args.checker or list(allowed)
    for c in checkers:
        if c not in CHECKERS:
            raise SpecError("--checker", c, f"must be one of {', '.join(CHECKERS)}")
        if c not in allowed:
            raise SpecError(
                "--checker", c, f"cannot take an engine; a --from mutant is scored by {', '.join(ENGINE_CHECKERS)}"
            )
    names = args.mutant or roster.names
    for name in names:
        if name not in roster.names:
            where = f"in {args.source}.ENGINES" if args.source else "of the catalogue"
            raise SpecError("--mutant", name, f"is not a mutant {where} ({', '.join(sorted(roster.names))})")
    return checkers, names, roster, Budget(args.examples, args.rlimit, args.budget)


def _run(cells: list[Cell], jobs: int) -> list[Kill]:
    """Every cell, with a progress line as each lands; the kills in the cells' order."""
    kills: list[Kill] = []
    with worker_pool(jobs) as pool:
        for k in pool.imap_unordered(run_cell, cells, chunksize=1):
            kills.append(k)
            tally = {v: sum(x.verdict == v for x in kills) for v in ("killed", "survived", "unknown", "error")}
            how = f"killed in {k.seconds:.1f} s ({k.what})" if k.killed else f"{k.verdict}: {k.what}"
            progress(
                "mutants",
                f"{len(kills)}/{len(cells)} cells done, {tally['killed']} killed, "
                f"{tally['survived']} survived, {tally['unknown']} budget spent"
                + (f", {tally['error']} checker errors" if tally["error"] else "")
                + f" ({k.mutant} x {k.checker}: {how})",
            )
    order = {(name, c): i for i, (name, c, _, _) in enumerate(cells)}
    return sorted(kills, key=lambda k: order[(k.mutant, k.checker)])


def show(name: str) -> tuple[str, bool]:
    """A mutant's change as a diff of its target's canonical source: the text its snippets are written against.

    (text, True), or, when the reference has drifted under the mutant, the
    error and the whole canonical source to rewrite it against, and False.
    """
    if name not in BY_NAME:
        raise SpecError("--show", name, f"is not a mutant of the catalogue ({', '.join(sorted(BY_NAME))})")
    mutant = BY_NAME[name]
    source = canonical_source(resolve(mutant.target)[3])
    header = f"{mutant.name} ({mutant.origin}): {mutant.description}\ntarget {mutant.target}, canonical source:\n"
    try:
        mutated = rewrite(source, mutant)
    except MutantDrift as e:
        return f"{e}\n{header}{source}\n", False
    diff = difflib.unified_diff(
        source.splitlines(), mutated.splitlines(), mutant.target, f"{mutant.target} ({name})", n=3, lineterm=""
    )
    return header + "\n".join(diff) + "\n", True


def cmd_mutants(args: argparse.Namespace, console: Console) -> int:
    if args.show:
        text, ok = show(args.show)
        print(text, end="")
        return 0 if ok else 1
    checkers, names, roster, budget = _check_args(args)
    out = OutDir(args.out, args.force, "--out", "mutants")
    out.prepare(OUTPUTS)  # now, not after an hour of cells
    kills = _run([(name, c, budget, roster.source) for name in names for c in checkers], args.jobs)

    console.print(kills_table(kills, names, checkers, budget))
    by = {(k.mutant, k.checker): k for k in kills}
    first = [min((k.seconds for k in kills if k.mutant == n and k.killed), default=None) for n in names]
    sizes = [min((k.size for k in kills if k.mutant == n and k.killed and k.size), default=None) for n in names]
    found = [t for t in first if t is not None]
    sized = [s for s in sizes if s]
    if found:
        console.print(f"median time to first counterexample: {statistics.median(found):.2f} s")
    if sized:
        console.print(
            f"median smallest counterexample: {statistics.median(s[0] for s in sized):g} requests, "
            f"{statistics.median(s[1] for s in sized):g} steps"
        )
    written = [out.file(n) for n in OUTPUTS]
    write_json_atomic(written[0], [{**k.__dict__, "verdict": k.verdict} for k in kills])
    write_bytes_atomic(written[1], markdown_table(kills, checkers, roster).encode())
    write_bytes_atomic(written[2], heatmap_png(kills, checkers, [n for n in roster.names if n in names]))
    out.record(written)
    console.print(f"written: {out.final(written[0])}, {OUTPUTS[1]}, {OUTPUTS[2]}")
    return run_verdict(names, by, checkers, console, roster.equivalent)


def run_verdict(
    names: list[str],
    by: dict[tuple[str, str], Kill],
    checkers: list[str],
    console: Console,
    equivalent: dict[str, str] | None = None,
) -> int:
    """1 if a mutant not argued equivalent escaped every checker, with the line that says how it escaped."""
    equivalent = EQUIVALENT if equivalent is None else equivalent
    escaped: dict[str, list[str]] = {"survived": [], "unknown": [], "error": []}
    for name in names:
        row = [by[(name, c)] for c in checkers]
        if any(k.killed for k in row) or name in equivalent:
            continue
        verdicts = {k.verdict for k in row}
        how = "unknown" if "unknown" in verdicts else "error" if "error" in verdicts else "survived"
        escaped[how].append(name)
        detail = ", ".join(f"{k.checker}: {k.what}" for k in row)
        console.print(
            {
                "survived": f"[red]survived every checker: {name}",
                "unknown": f"[yellow]not killed, budget spent: {name} ({detail})",
                "error": f"[magenta]not killed, a checker failed: {name} ({detail})",
            }[how]
        )
    why = []
    if escaped["survived"]:
        why.append(f"{len(escaped['survived'])} survived every checker ({', '.join(escaped['survived'])})")
    if escaped["unknown"]:
        why.append(
            f"{len(escaped['unknown'])} not killed before the budget was spent "
            f"({', '.join(escaped['unknown'])}); a larger --budget or --rlimit may decide them"
        )
    if escaped["error"]:
        why.append(f"{len(escaped['error'])} not killed because a checker failed ({', '.join(escaped['error'])})")
    if why:
        progress("mutants", "FAILED: " + "; ".join(why))
    return 1 if why else 0


def add_mutants_parser(sub: Subcommands) -> None:
    p = sub.add_parser("mutants", help="run each bug-zoo mutant through each checker and print the kill table")
    p.add_argument("--checker", action="append", help=f"one of {', '.join(CHECKERS)} (repeatable; default: all)")
    p.add_argument("--mutant", action="append", help="only this mutant (repeatable)")
    p.add_argument(
        "--from",
        dest="source",
        metavar="MODULE",
        help="score the engines MODULE lists in ENGINES (your own mutants) instead of the catalogue's",
    )
    p.add_argument("--jobs", type=int, default=1, help="cells run side by side (default 1)")
    p.add_argument(
        "--examples",
        type=int,
        default=DEFAULT_EXAMPLES,
        metavar="N",
        help="per cell: workloads searched (monitors, diff), state-machine examples (hypothesis), CrossHair "
        f"iterations, all from a fixed seed; decides the verdicts (default {DEFAULT_EXAMPLES})",
    )
    p.add_argument(
        "--rlimit",
        type=int,
        default=DEFAULT_Z3_RLIMIT,
        metavar="R",
        help=f"Z3 work units per query, deterministic on any machine (default {DEFAULT_Z3_RLIMIT})",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_CAP_S,
        metavar="S",
        help=f"safety cap in seconds per cell, {MIN_SECONDS:g} to {MAX_SECONDS:.0f}: a cell cut short by it is "
        f"unknown, never survived (default {DEFAULT_CAP_S:g})",
    )
    p.add_argument(
        "--out", default="mutant-scores", metavar="DIR", help="folder for mutants.json, mutants.md and mutants.png"
    )
    p.add_argument("--force", action="store_true", help="replace an earlier run's tables in --out")
    p.add_argument(
        "--show",
        metavar="NAME",
        help="print the mutant's change against its target's canonical source "
        "(the form snippets are written in), and run nothing",
    )
    p.set_defaults(func=cmd_mutants)
