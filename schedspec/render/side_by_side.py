"""The steps around a divergence as a rich table, for a terminal.

`conformance/harness/explain.py:side_by_side` chooses the rows; this only
colours them, so the certificate's Markdown and the terminal show the same
steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    pass


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
