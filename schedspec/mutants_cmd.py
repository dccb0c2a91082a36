"""`schedspec mutants`: the bug zoo as mutants, every checker's score, a table and a heatmap."""

from __future__ import annotations

import argparse
import io
import multiprocessing
import os
import statistics

from rich.console import Console
from rich.table import Table

from .conformance.mutants import EQUIVALENT, MUTANTS
from .conformance.mutation import CHECKERS, Kill, run_cell
from .spec.errors import SpecError
from .spec.jsonio import write_bytes_atomic, write_json_atomic


def markdown_table(kills: list[Kill], checkers: list[str]) -> str:
    by = {(k.mutant, k.checker): k for k in kills}
    lines = ["| mutant | origin | " + " | ".join(checkers) + " |", "|---|---|" + "---|" * len(checkers)]
    for m in MUTANTS:
        cells = []
        for c in checkers:
            k = by.get((m.name, c))
            if k is None:
                cells.append("")
            elif k.killed:
                size = f", {k.size[0]} req / {k.size[1]} steps" if k.size else ""
                cells.append(f"killed {k.seconds:.1f}s ({k.what}{size})")
            else:
                cells.append("—")
        lines.append(f"| `{m.name}` | {m.origin} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def heatmap_png(kills: list[Kill], checkers: list[str]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {(k.mutant, k.checker): k for k in kills}
    grid = [[(1.0 if by[(m.name, c)].killed else 0.0) if (m.name, c) in by else float("nan") for c in checkers]
            for m in MUTANTS]
    fig, ax = plt.subplots(figsize=(1.6 * len(checkers) + 3, 0.4 * len(MUTANTS) + 1.5))
    ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(checkers)), checkers)
    ax.set_yticks(range(len(MUTANTS)), [m.name for m in MUTANTS], fontsize=8)
    for i, m in enumerate(MUTANTS):
        for j, c in enumerate(checkers):
            k = by.get((m.name, c))
            if k is not None:
                ax.text(j, i, f"{k.seconds:.1f}s" if k.killed else "survived", ha="center", va="center", fontsize=7)
    ax.set_title("mutant x checker: green = killed (time to first counterexample)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def cmd_mutants(args: argparse.Namespace, console: Console) -> int:
    checkers = args.checker or list(CHECKERS)
    for c in checkers:
        if c not in CHECKERS:
            raise SpecError("--checker", c, f"must be one of {', '.join(CHECKERS)}")
    names = args.mutant or [m.name for m in MUTANTS]
    known = {m.name for m in MUTANTS}
    for name in names:
        if name not in known:
            raise SpecError("--mutant", name, f"is not a mutant of the catalogue ({', '.join(sorted(known))})")
    cells = [(name, c, args.budget) for name in names for c in checkers]
    if args.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            kills = pool.map(run_cell, cells, chunksize=1)
    else:
        kills = [run_cell(cell) for cell in cells]

    table = Table(title=f"mutants x checkers (budget {args.budget:g} s per cell)")
    table.add_column("mutant")
    for c in checkers:
        table.add_column(c)
    by = {(k.mutant, k.checker): k for k in kills}
    survivors = []
    for name in names:
        row = [by[(name, c)] for c in checkers]
        if not any(k.killed for k in row):
            survivors.append(name)
        table.add_row(name, *[f"[green]{k.seconds:.1f}s {k.what}" + (f" {k.size}" if k.size else "") if k.killed
                              else f"[red]{k.what}" for k in row])
    console.print(table)
    first = [min((k.seconds for k in kills if k.mutant == n and k.killed), default=None) for n in names]
    sizes = [min((k.size for k in kills if k.mutant == n and k.killed and k.size), default=None) for n in names]
    found = [t for t in first if t is not None]
    sized = [s for s in sizes if s]
    if found:
        console.print(f"median time to first counterexample: {statistics.median(found):.2f} s")
    if sized:
        console.print(f"median smallest counterexample: {statistics.median(s[0] for s in sized):g} requests, "
                      f"{statistics.median(s[1] for s in sized):g} steps")
    os.makedirs(args.out, exist_ok=True)
    write_json_atomic(os.path.join(args.out, "mutants.json"), [k.__dict__ for k in kills])
    write_bytes_atomic(os.path.join(args.out, "mutants.md"), markdown_table(kills, checkers).encode())
    write_bytes_atomic(os.path.join(args.out, "mutants.png"), heatmap_png(kills, checkers))
    console.print(f"written: {args.out}/mutants.json, mutants.md, mutants.png")
    unexplained = [s for s in survivors if s not in EQUIVALENT]
    for s in unexplained:
        console.print(f"[red]survived every checker: {s}")
    return 1 if unexplained else 0


def add_mutants_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mutants", help="run each bug-zoo mutant through each checker and print the kill table")
    p.add_argument("--checker", action="append", help=f"one of {', '.join(CHECKERS)} (repeatable; default: all)")
    p.add_argument("--mutant", action="append", help="only this mutant (repeatable)")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--budget", type=float, default=30.0, help="seconds per mutant and checker")
    p.add_argument("--out", default="mutants", help="folder for mutants.json, mutants.md and mutants.png")
    p.set_defaults(func=cmd_mutants)
