"""Planting a mutant: one function of the reference, rewritten at run time.

A mutant names a function or method of the reference (`module:qualname`)
and one change inside it, as a pair of snippets: the code to find and what
to put instead. Nothing is edited on disk. The function's source is parsed
and printed back by `ast.unparse`, the *canonical source*, and the snippets
are matched against that. So a mutant is anchored on a name and on code,
never on formatting: `ruff format`, which by contract leaves the AST alone,
can reformat the reference freely, and comments can change, without moving
a mutant. Only a change to the code itself can, and then the mutant fails
loudly (its snippet no longer occurs exactly once) instead of silently
testing nothing.

Snippets are written as `ast.unparse` prints them: single quotes, no
comments, no line breaks inside a statement, and a block's lines indented
by four spaces relative to its first line, whatever depth it sits at.
`schedspec mutants --show NAME` prints a mutant's function in this form with
the change marked, which is how to write a new one.

The mutated function is compiled in the original's module, at the
original's file and lines (`compiled`), and swapped in
wherever the original object is referenced (`from .rules import x` keeps its
own reference). The Z3 encoding calls the same `rules` functions, so a
mutant of a rule reaches it too: a bug is written once.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import CodeType, ModuleType
from typing import Protocol, TypeGuard


@dataclass(frozen=True)
class Mutant:
    name: str
    origin: str  # a bug-zoo id (Z1..Z14) or "classic"
    description: str
    target: str  # "module:qualname", module relative to schedspec
    find: str  # canonical (ast.unparse) code inside the target, occurring exactly once
    replace: str
    expect: tuple[str, ...]  # invariants (or checks) expected to trip
    # The workload families that exercise it; () for the core scope's nine (`hunt.CORE_FAMILIES`).
    families: tuple[str, ...] = ()
    # A floor under the state machine's count of examples, for a bug that only a deep search reaches:
    # a run with `--examples` below it would report a survivor that is really a search too short.
    min_examples: int = 0


class MutantDrift(RuntimeError):
    """The reference changed under a mutant: its snippet no longer occurs exactly once."""


def resolve(target: str) -> tuple[ModuleType, object, str, Callable[..., object]]:
    """`module:qualname` -> (module, the object holding the function, its attribute name, the function)."""
    module_name, _, qualname = target.partition(":")
    module = importlib.import_module(f"schedspec.{module_name}")
    owner_name, *rest = qualname.split(".")
    if rest:
        cls = getattr(module, owner_name)
        return module, cls, rest[0], cls.__dict__[rest[0]]
    return module, module, owner_name, getattr(module, owner_name)


def canonical_source(function: Callable[..., object]) -> str:
    """The function as `ast.unparse` prints it: the same text for every formatting of the same code."""
    return ast.unparse(ast.parse(textwrap.dedent(inspect.getsource(function))))


def _placed(snippet: str, indent: str) -> str:
    """A snippet's continuation lines moved to the depth of the line its first line is found on."""
    return snippet.replace("\n", "\n" + indent)


def mutated_source(mutant: Mutant) -> str:
    """The target's canonical source with the mutant's change made."""
    return rewrite(canonical_source(resolve(mutant.target)[3]), mutant)


def rewrite(source: str, mutant: Mutant) -> str:
    """`source` (canonical) with the mutant's change made; `MutantDrift` unless its snippet occurs exactly once."""
    at, find, replace = _locate(source, mutant)
    return source[:at] + replace + source[at + len(find) :]


def _locate(source: str, mutant: Mutant) -> tuple[int, str, str]:
    """Where the snippet sits in `source`, and the find and replace text as placed there.

    A snippet's first line may start anywhere on a line; each further line
    must sit at the same depth relative to it as in the snippet.
    """
    hits = []
    for line_start in [0, *(i + 1 for i, c in enumerate(source) if c == "\n")]:
        line = source[line_start : source.find("\n", line_start) % (len(source) + 1)]
        indent = line[: len(line) - len(line.lstrip(" "))]
        find = _placed(mutant.find, indent)
        at = source.find(find, line_start)
        while at != -1 and source.rfind("\n", 0, at) + 1 == line_start:
            hits.append((at, find, _placed(mutant.replace, indent)))
            at = source.find(find, at + 1)
    if len(hits) != 1:
        raise MutantDrift(
            f"mutant {mutant.name}: {mutant.find!r} occurs {len(hits)} times in the canonical source "
            f"of {mutant.target}; the reference changed, update the mutant "
            f"(`schedspec mutants --show {mutant.name}` prints the source to write it against)"
        )
    return hits[0]


_Position = tuple[str, int, int, int, int]  # node type, line, column, end line, end column


class _Located(Protocol):
    """A node with a place in the source: a statement, an expression, an argument... (ast gives them no common base)."""

    lineno: int
    col_offset: int
    end_lineno: int | None
    end_col_offset: int | None


def _located(node: ast.AST) -> TypeGuard[_Located]:
    return hasattr(node, "lineno")


def _positions(node: ast.AST) -> _Position | None:
    # ast sets the two ends together: testing both is for the type checker.
    if not _located(node) or node.end_lineno is None or node.end_col_offset is None:
        return None
    return (type(node).__name__, node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)


def compiled(mutant: Mutant, function: Callable[..., object]) -> CodeType:
    """The mutated function's code, placed in the reference's own file.

    Compiling the canonical text as it stands would number its lines from 1
    in a file of its own, and a crash inside a mutant would point nowhere.
    So every node the mutant left alone gets back its position in the real
    file (canonical and original trees are the same tree, walked in step),
    and the nodes it wrote sit on the first line of the code it replaced.
    A traceback then names the reference's file and line, as it would for
    a bug written there.
    """
    lines, first = inspect.getsourcelines(function)
    original = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(original, first - 1)
    indent = len(lines[0]) - len(lines[0].lstrip())
    source = ast.unparse(original)
    at, find, replace = _locate(source, mutant)
    home: dict[_Position, _Position] = {}
    by_start: dict[tuple[str, int, int], _Position] = {}  # for a node that starts before the change and ends in it
    for theirs, ours in zip(ast.walk(ast.parse(source)), ast.walk(original), strict=True):
        key, value = _positions(theirs), _positions(ours)
        if key is not None and value is not None:
            home[key] = value
            by_start.setdefault(key[:3], value)  # ast.walk goes outside in: the outermost node of a chain
    top = source[:at].count("\n") + 1  # the region's first and last canonical lines, before and after
    shift = replace.count("\n") - find.count("\n")
    region_home = next(v[1] for k, v in home.items() if k[1] == top)

    def canonical_line(line: int) -> int | None:
        return line if line < top else None if line <= top + replace.count("\n") else line - shift

    tree = ast.parse(source[:at] + replace + source[at + len(find) :])
    for node in ast.walk(tree):
        pos = _positions(node)
        if pos is None:
            continue
        assert _located(node)  # _positions found its place
        start, end = canonical_line(pos[1]), canonical_line(pos[3])
        kept = (
            home.get((pos[0], start, pos[2], end, pos[4]))
            if start and end
            else by_start.get((pos[0], start, pos[2]))
            if start
            else None
        )
        line, col, end_line, end_col = kept[1:] if kept else (region_home, 0, region_home, 0)
        node.lineno, node.col_offset = line, col + indent
        node.end_lineno, node.end_col_offset = end_line, end_col + indent
    return compile(tree, inspect.getsourcefile(function) or f"<mutant {mutant.name}>", "exec")


@contextmanager
def applied(mutant: Mutant) -> Iterator[None]:
    """Swap the mutated function in everywhere the original is referenced; restore on exit."""
    module, owner, attr, original = resolve(mutant.target)
    namespace: dict[str, object] = {}
    exec(compiled(mutant, original), vars(module), namespace)
    mutated = namespace[attr]
    patched: list[tuple[object, str]] = [(owner, attr)]
    setattr(owner, attr, mutated)
    for m in list(sys.modules.values()):
        if getattr(m, "__name__", "").startswith("schedspec") and m is not owner and vars(m).get(attr) is original:
            setattr(m, attr, mutated)
            patched.append((m, attr))
    try:
        yield
    finally:
        for obj, name in patched:
            setattr(obj, name, original)
