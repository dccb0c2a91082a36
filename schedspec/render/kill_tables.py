"""The mutant x checker kill matrix as a person reads it: a rich table, Markdown and a heatmap.

Every cell that is not a kill says why in the same words everywhere
(`missed_word`): "—" only for a checker that used its whole count and
missed, so a budget spent or a crashed checker never reads as a survivor.
"""

from __future__ import annotations

import io

from rich.table import Table

from ..kill_matrix import BUDGET_SPENT, Budget, Kill, Roster, catalogue_roster
from ..mutants import MUTANTS
from .step_table import add_name_column


def missed_word(k: Kill) -> str:
    """A cell that is not a kill, in a word or two; "—" only for a checker that finished and missed the mutant."""
    if k.verdict == "unknown":
        return BUDGET_SPENT if k.what.startswith(BUDGET_SPENT) else "unknown"
    return {"error": "checker error", "survived": "—"}[k.verdict]


def markdown_table(kills: list[Kill], checkers: list[str], roster: Roster | None = None) -> str:
    roster = roster or catalogue_roster()
    by = {(k.mutant, k.checker): k for k in kills}
    lines = ["| mutant | origin | " + " | ".join(checkers) + " |", "|---|---|" + "---|" * len(checkers)]
    for name in roster.names:
        cells = []
        for c in checkers:
            k = by.get((name, c))
            if k is None:
                cells.append("")
            elif k.killed:
                size = f", {k.size[0]} req / {k.size[1]} steps" if k.size else ""
                cells.append(f"killed {k.seconds:.1f}s ({k.what}{size})")
            else:
                cells.append(missed_word(k))
        lines.append(f"| `{name}` | {roster.origin[name]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def heatmap_png(kills: list[Kill], checkers: list[str], names: list[str] | None = None) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = names if names is not None else [m.name for m in MUTANTS]
    by = {(k.mutant, k.checker): k for k in kills}
    shade = {"killed": 1.0, "unknown": 0.5, "error": 0.5, "survived": 0.0}
    grid = [[shade[by[(n, c)].verdict] if (n, c) in by else float("nan") for c in checkers] for n in names]
    fig, ax = plt.subplots(figsize=(1.6 * len(checkers) + 3, 0.4 * len(names) + 1.5))
    ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(checkers)), checkers)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    for i, n in enumerate(names):
        for j, c in enumerate(checkers):
            k = by.get((n, c))
            if k is not None:
                label = f"{k.seconds:.1f}s" if k.killed else missed_word(k)  # the table's words
                dark = shade[k.verdict] in (0.0, 1.0)  # the green and red ends of the map
                ax.text(j, i, label, ha="center", va="center", fontsize=7, color="white" if dark else "black")
    ax.set_title(
        "mutant x checker: green = killed (time to first counterexample), yellow = budget spent, red — = missed",
        fontsize=9,
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def kills_table(kills: list[Kill], names: list[str], checkers: list[str], budget: Budget) -> Table:
    """The mutants x checkers table the command prints: each cell the time and what caught the mutant, or why
    nothing did."""
    table = Table(
        title=f"mutants x checkers ({budget.examples} examples, Z3 rlimit {budget.rlimit} per query; "
        f"safety cap {budget.cap_s:g} s per cell)"
    )
    add_name_column(table, "mutant", names)
    for c in checkers:
        table.add_column(c, overflow="fold")  # narrow: wrapped, never elided
    by = {(k.mutant, k.checker): k for k in kills}
    style = {"survived": "red", "unknown": "yellow", "error": "magenta"}
    for name in names:
        row = [by[(name, c)] for c in checkers]
        table.add_row(
            name,
            *[
                f"[green]{k.seconds:.1f}s {k.what}" + (f" {k.size}" if k.size else "")
                if k.killed
                else f"[{style[k.verdict]}]{k.what}"
                for k in row
            ],
        )
    return table
