"""Tables fit a narrow terminal without cutting names: at 80 and 100 columns every mutant's name is printed
whole in the `schedspec mutants` table, and the other cells wrap instead."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from schedspec.kill_matrix import CHECKERS, Budget, Kill
from schedspec.mutants import MUTANTS
from schedspec.render.kill_tables import kills_table


@pytest.mark.parametrize("width", [80, 100])
def test_every_mutant_name_is_printed_whole(width: int) -> None:
    names = [m.name for m in MUTANTS]
    checkers = list(CHECKERS)
    kills = [
        Kill(
            name, c, killed=i % 3 != 0, what="budget spent" if i % 3 == 0 else "token-bounds", seconds=1.5, size=(2, 7)
        )
        for i, name in enumerate(names)
        for c in checkers
    ]
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(kills_table(kills, names, checkers, Budget()))
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= width
    lines = text.splitlines()
    missing = [n for n in names if not any(n in line for line in lines)]
    assert not missing, f"cut at {width} columns: {missing}"
    assert "…" not in text


@pytest.mark.parametrize("name", ["seed-long-prompt", "seed-preemption"])
def test_the_simulate_table_fits_100_columns_whole(name: str) -> None:
    from schedspec.conformance.workloads.builtin import BUILTIN
    from schedspec.reference_impl import simulate
    from schedspec.render.step_table import step_table

    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(step_table(simulate(BUILTIN[name]())))
    text = out.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 100
    header = " ".join(text.split("┡")[0].split())
    assert all(col in header for col in ("step", "admitted", "finished", "run", "wait", "free blk")), header
