"""A divergence as people read it: the few steps before it, side by side, the diverging field marked.

A counterexample file is complete but not readable: a workload and a JSON
divergence. What a reader needs is the last few steps both engines took,
what each granted and preempted, and the one field that differs, traced
back through those steps so its history is visible (a waiting queue that
was the same a step ago and is reversed now says "preemption order").

`side_by_side` builds that window once, as plain strings, from the records the
lock-step differ kept. The same rows go into the certificate (JSON and
Markdown), the pytest plugin's failure message and `schedspec replay`, so
every place shows the same table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...spec.trace import StepRecord
from .compare import observables
from .differ import Divergence

WINDOW = 5  # steps shown before the diverging one
TOKENS_FIELD = "output.num_scheduled_tokens"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        pairs = (f"{x[0]}:{x[1]}" if isinstance(x, (list, tuple)) and len(x) == 2 else str(x) for x in value)
        return ", ".join(pairs) or "(none)"
    return str(value)


def _tokens(r: StepRecord | None) -> str:
    return "" if r is None else (" ".join(f"{k}:{v}" for k, v in r.output.num_scheduled_tokens.items()) or "(none)")


def _preempted(r: StepRecord | None) -> str:
    return "" if r is None else (",".join(sorted(r.output.preempted_req_ids)) or "-")


def _field(r: StepRecord | None, field: str) -> str:
    if r is None:
        return ""
    values = dict(observables(r, "blocks"))
    return _fmt(values[field]) if field in values else "(absent)"


def side_by_side(
    records_a: Sequence[StepRecord], records_b: Sequence[StepRecord], d: Divergence, window: int = WINDOW
) -> dict[str, Any]:
    """The diverging step and field, and one row per step from `window` steps before it through it."""
    by_step_a: dict[int, StepRecord | None] = {r.step: r for r in records_a}
    by_step_b: dict[int, StepRecord | None] = {r.step: r for r in records_b}
    by_step_a.setdefault(d.step, d.records[0])
    by_step_b.setdefault(d.step, d.records[1])
    traced = d.field.startswith(("output.", "state.", "finished"))  # a per-step observable, not a crash or a length
    rows = []
    for step in range(max(0, d.step - window), d.step + 1):
        ra, rb = by_step_a.get(step), by_step_b.get(step)
        last = step == d.step
        rows.append(
            {
                "step": step,
                "tokens_a": _tokens(ra),
                "tokens_b": _tokens(rb),
                "preempted": f"{_preempted(ra)} / {_preempted(rb)}" if ra or rb else "",
                "field_a": _fmt(d.a) if last else (_field(ra, d.field) if traced else ""),
                "field_b": _fmt(d.b) if last else (_field(rb, d.field) if traced else ""),
                "diverges": last,
            }
        )
    return {"step": d.step, "field": d.field, "rows": rows}


def markdown_table(table: dict[str, Any], name_a: str = "a", name_b: str = "b") -> list[str]:
    """The table in Markdown; the diverging step is marked with an arrow and the diverging cells are bold."""
    field = table["field"]
    tokens_is_field = field == TOKENS_FIELD
    head = ["step", f"scheduled ({name_a})", f"scheduled ({name_b})", "preempted a / b"]
    if not tokens_is_field:
        head += [f"`{field}` ({name_a})", f"`{field}` ({name_b})"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table["rows"]:
        on = r["diverges"]
        bold = lambda s, hi: f"**{s}**" if hi and s else s  # noqa: E731
        cells = [
            f"**{r['step']}** ⟵" if on else str(r["step"]),
            bold(r["tokens_a"], on and tokens_is_field),
            bold(r["tokens_b"], on and tokens_is_field),
            r["preempted"],
        ]
        if not tokens_is_field:
            cells += [bold(r["field_a"], on), bold(r["field_b"], on)]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines
