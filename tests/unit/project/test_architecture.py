"""docs/architecture.md's rule map names only things that exist, and leaves no rule out.

The map is where an engineer changing a rule learns which call sites,
twins, invariants and mutants go with it. A stale map is worse than none, so
every backticked name in it is resolved here. Functions and classes are
imported by their dotted names, invariants are looked up in the catalogue,
mutants in the mutant tables. Every function of the rules homes must have a
row, and every mutant planted in a rule must be listed in that rule's row.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

from schedspec.mutants import BY_NAME as MUTANTS, MUTANTS as ALL_MUTANTS
from schedspec.spec.invariants import MONITORED_BY_NAME as INVARIANTS  # the catalogue and the decision invariants

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "architecture.md"
HOMES = ("reference_impl.rules", "spec.rules")
COLUMNS = ("rule", "home", "reference", "spec", "Z3", "torch", "invariants", "mutants")
NAME_COLUMNS = ("home", "reference", "spec", "Z3", "torch")


def rule_map() -> list[dict[str, list[str]]]:
    """The rows of the table under "## Rule map", each column as the list of its backticked names."""
    text = DOC.read_text()
    section = text.split("## Rule map", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert tuple(header) == COLUMNS, header
    rows = []
    for line in lines[2:]:  # past the header and its --- separator
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == len(COLUMNS), line
        for cell in cells[1:]:  # a cell is backticked names or "—", nothing that could hide an unchecked name
            assert cell == "—" or re.fullmatch(r"`[^`]+`(, `[^`]+`)*", cell), (cells[0], cell)
        rows.append({col: re.findall(r"`([^`]+)`", cell) for col, cell in zip(COLUMNS, cells)} | {"rule": cells[0]})
    return rows


ROWS = rule_map()


def resolve(dotted: str):
    """`spec.rules.victim_key` -> the object: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module("schedspec." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def home_functions() -> list[str]:
    names = []
    for home in HOMES:
        module = importlib.import_module(f"schedspec.{home}")
        names += [
            f"{home}.{n}"
            for n, f in vars(module).items()
            if inspect.isfunction(f) and f.__module__ == module.__name__ and not n.startswith("_")
        ]
    return names


def test_the_map_has_rows():
    assert len(ROWS) >= 19
    assert all(len(r["home"]) == 1 for r in ROWS), "one home per rule"


@pytest.mark.parametrize("column", NAME_COLUMNS)
def test_every_named_function_exists(column):
    missing = []
    for row in ROWS:
        for name in row[column]:
            try:
                resolve(name)
            except (ImportError, AttributeError) as e:
                missing.append(f"{row['rule']}: {name} ({e})")
    assert not missing, "\n".join(missing)


def test_every_named_invariant_is_in_the_catalogue():
    unknown = [(r["rule"], n) for r in ROWS for n in r["invariants"] if n not in INVARIANTS]
    assert not unknown


def test_every_named_mutant_exists():
    unknown = [(r["rule"], n) for r in ROWS for n in r["mutants"] if n not in MUTANTS]
    assert not unknown


def test_every_function_of_the_rules_homes_has_a_row():
    homes = {r["home"][0] for r in ROWS}
    functions = home_functions()
    assert len(functions) >= 19, functions
    assert not set(functions) - homes, f"rules with no row in the map: {sorted(set(functions) - homes)}"


def test_every_mutant_of_a_rule_is_in_its_row():
    by_home = {r["home"][0]: set(r["mutants"]) for r in ROWS}
    for m in ALL_MUTANTS:
        module, _, qualname = m.target.partition(":")
        if module in HOMES:
            assert m.name in by_home[f"{module}.{qualname}"], f"{m.name} mutates {m.target}, missing from its row"


def test_every_named_twin_is_checked_against_its_rule():
    """A twin the map names (a `gpu_impl.rules` function or a `*_twin`) is exercised by test_rule_twins.py."""
    source = (REPO / "tests" / "unit" / "gpu_impl" / "test_rule_twins.py").read_text()
    twins = {n for r in ROWS for n in r["torch"] if n.startswith("gpu_impl.rules.") or n.endswith("_twin")}
    assert twins
    unchecked = sorted(n for n in twins if not re.search(rf"\b{re.escape(n.rsplit('.', 1)[1])}\(", source))
    assert not unchecked, f"twins with no check in test_rule_twins.py: {unchecked}"


def test_the_files_to_touch_exist():
    section = DOC.read_text().split("## Files to touch when a rule changes", 1)[1]
    paths = set(re.findall(r"`((?:[\w.]+/)+[\w.]+\.(?:py|md))`", section))
    assert len(paths) >= 8
    assert not [p for p in paths if not (REPO / p).exists()]
