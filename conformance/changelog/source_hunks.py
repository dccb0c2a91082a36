"""Which scheduler source hunks changed between two vLLM releases, and did any workload reach them?

Design notes
------------
* Why: `schedspec changelog A B` runs two releases on generated workloads;
  a hunk of vLLM's scheduler that changed between them and that no workload
  ran is a difference the campaign cannot have seen. Listing those hunks is
  the honest limit of the changelog, and the ones whose function did run
  are steering targets for the generators.
* The changes are a line diff (difflib) of the two installed packages'
  scheduler sources (`SCHEDULER_SOURCES`); a file only on one side is one
  whole-file hunk, and a pure insertion or deletion is cut where the
  enclosing function changes (a release that moves ten functions to another
  file lists ten hunks, each with its name). The lines that ran come from the vLLM driver
  (`vllm_env/line_coverage.py`, $SCHEDSPEC_VLLM_COVERAGE), one JSON file per
  driver process, merged here per release (`load_lines`).
* A hunk that changes no code is dropped. This is decided from the sources
  with tokenize and ast, not from coverage's statement sets: it works before
  any run, it sees a change on the continuation line of a multi-line
  statement (coverage's statements name first lines only), and it compares
  the code tokens of the two sides (comments, blank lines and docstrings
  left out; indentation and statement ends kept), so a reworded comment, a
  docstring edit or a call rewrapped over more lines is not code, while a
  statement indented into a block is.
* Reach is judged on each side with that side's run: an executed line among
  the hunk's statements on B (its B lines), or on A (its A lines). A
  statement spread over lines counts as a whole (coverage records one of its
  lines). A `def` line runs at import, while what a signature change alters
  happens at a call: a def header counts as reached when its body's first
  statement ran. Pure deletions have no B lines and are judged on A alone:
  the deleted statements ran on A, so a workload took the path that B
  changed. When the lines of a side hold no statement of their own (a
  deleted `else:` or `finally:`), the statements just
  before and after them count instead: they are the nearest evidence that
  control passed there. Only then: a deleted statement that never ran on A
  was not reached, however busy its neighbours were.
* An unreached hunk is "function never entered" when no line of its
  enclosing function's body ran on either side (a feature the spec does not model:
  KV connectors, encoders, LoRA), else "function entered, these lines not":
  the interesting ones, a branch the workloads could be steered into.
"""

from __future__ import annotations

import ast
import difflib
import io
import json
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEDULER_SOURCES = ("v1/core/**/*.py", "v1/request.py")  # relative to the vllm package folder
NEVER_ENTERED, ENTERED = "function never entered", "function entered, these lines not"
_NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}


def scheduler_files(root: Path) -> list[str]:
    """The scheduler's source files under a vllm package folder, relative and '/'-separated."""
    return sorted({p.relative_to(root).as_posix() for pat in SCHEDULER_SOURCES for p in Path(root).glob(pat)})


def package_root(venv: Path) -> Path:
    """The `vllm` package folder a release venv installed (`.venv-vllm-ref/lib/python3.11/site-packages/vllm`)."""
    found = sorted(Path(venv).glob("lib/python*/site-packages/vllm"))
    if not found:
        raise FileNotFoundError(f"no vllm package in {venv}")
    return found[0]


@dataclass(frozen=True)
class Hunk:
    """One changed region of one file. Ranges are 1-based [start, stop); start == stop is an empty range."""

    file: str
    a: tuple[int, int]
    b: tuple[int, int]
    qualname: str  # the enclosing function ("Scheduler.schedule"), class, or "<module>"
    first_line: str  # its first changed line of code, for display ("- " prefixed when the hunk only deletes)
    a_probe: frozenset[int] = field(default=frozenset(), repr=False)  # A lines whose execution reaches it
    b_probe: frozenset[int] = field(default=frozenset(), repr=False)
    a_function: frozenset[int] = field(default=frozenset(), repr=False)  # the enclosing function's lines on A
    b_function: frozenset[int] = field(default=frozenset(), repr=False)

    def where(self) -> str:
        lo, hi = self.b
        return f"{self.file}:{lo}-{hi - 1}" if hi > lo else f"{self.file}:{lo} (deleted before it)"


@dataclass(frozen=True)
class LineSets:
    executed: frozenset[int]
    statements: frozenset[int]


@dataclass(frozen=True)
class HunkReach:
    hunk: Hunk
    on_a: bool  # an executed line of A among its A lines
    on_b: bool
    entered: bool  # a line of its enclosing function ran, on either side

    @property
    def reached(self) -> bool:
        return self.on_a or self.on_b

    @property
    def status(self) -> str:
        return "reached" if self.reached else ENTERED if self.entered else NEVER_ENTERED


class _Source:
    """One file's lines, code tokens per line, statement header spans and function spans."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        tree = ast.parse(text)
        docs = {n for s in ast.walk(tree) if (n := _docstring(s)) is not None}
        doc_lines = {i for d in docs for i in range(d.lineno, (d.end_lineno or d.lineno) + 1)}
        self.tokens: dict[int, list[tuple[int, str]]] = {}
        for t in tokenize.generate_tokens(io.StringIO(text).readline):
            if t.type not in _NOT_CODE and t.start[0] not in doc_lines:
                self.tokens.setdefault(t.start[0], []).append((t.type, t.string))
        self.header: dict[int, tuple[int, int]] = {}  # line -> its statement's header span [first, last]
        self.def_body: dict[tuple[int, int], int] = {}  # a def's header span -> its body's first statement
        self.starts: list[int] = []  # the first line of every statement but docstrings
        self.func: dict[int, str] = {}  # line -> the innermost enclosing def or class
        self.spans: dict[str, frozenset[int]] = {"<module>": frozenset(range(1, len(self.lines) + 1))}
        self._walk(tree, "", docs)

    def _walk(self, node: ast.AST, prefix: str, docs: set[ast.Expr]) -> None:
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.stmt, ast.ExceptHandler)) or child in docs:  # `except X:` runs too
                continue
            first = min([child.lineno] + [d.lineno for d in getattr(child, "decorator_list", [])])
            body = [s for s in getattr(child, "body", []) if s not in docs]
            span = (first, max(first, body[0].lineno - 1 if body else child.end_lineno or first))
            self.starts.append(first)
            self.header.update(dict.fromkeys(range(span[0], span[1] + 1), span))
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if body and not isinstance(child, ast.ClassDef):
                    self.def_body[span] = body[0].lineno
                name = prefix + child.name
                lines = range(first, (child.end_lineno or first) + 1)
                self.func.update(dict.fromkeys(lines, name))
                if span in self.def_body:  # entered: its body ran, not its def line (which runs at import)
                    lines = range(span[1] + 1, (child.end_lineno or first) + 1)
                self.spans.setdefault(name, frozenset(lines))
                self._walk(child, name + ".", docs)
            else:
                self._walk(child, prefix, docs)

    def code(self, lo: int, hi: int) -> list[tuple[int, str]]:
        return [t for line in range(lo, hi) for t in self.tokens.get(line, ())]

    def _span(self, line: int) -> tuple[int, int]:
        """The header span of the statement at `line`; a def's is its body's first statement's (it runs at calls)."""
        span = self.header[line]
        return self._span(self.def_body[span]) if span in self.def_body else span

    def probe(self, lo: int, hi: int) -> frozenset[int]:
        """The lines whose execution means the range [lo, hi) was reached (design notes)."""
        spans = {self._span(line) for line in range(lo, hi) if line in self.header}
        if hi > lo and not spans:  # no statement of its own: its neighbours'
            before = max((s for s in self.starts if s < lo), default=0)
            after = min((s for s in self.starts if s >= hi), default=0)
            spans = {self._span(s) for s in (before, after) if s}
        return frozenset(i for first, last in spans for i in range(first, last + 1))


def _docstring(node: ast.AST) -> ast.Expr | None:
    body = getattr(node, "body", None)
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
        first = body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            return first
    return None


def _pieces(src: _Source, lo: int, hi: int) -> list[tuple[int, int]]:
    """[lo, hi) cut where the enclosing function changes: a block of deleted functions is one hunk each."""
    cuts = [line for line in range(lo + 1, hi) if src.func.get(line) != src.func.get(line - 1)]
    bounds = [lo, *cuts, hi]
    return list(zip(bounds, bounds[1:], strict=False))


def changed_hunks(root_a: Path, root_b: Path) -> list[Hunk]:
    """The hunks of code that differ between two vllm package folders' scheduler sources, file by file.

    A pure insertion or deletion is cut at function boundaries (one hunk per function it adds or removes);
    a replacement stays whole, and so does a file found on one side only.
    """
    hunks: list[Hunk] = []
    for rel in sorted(set(scheduler_files(Path(root_a))) | set(scheduler_files(Path(root_b)))):
        pa, pb = Path(root_a) / rel, Path(root_b) / rel
        a = _Source(pa.read_text(encoding="utf-8") if pa.exists() else "")
        b = _Source(pb.read_text(encoding="utf-8") if pb.exists() else "")
        ops = difflib.SequenceMatcher(None, a.lines, b.lines, autojunk=False).get_opcodes()
        if not pa.exists() or not pb.exists():  # a whole-file hunk
            ops = [("replace", 0, len(a.lines), 0, len(b.lines))]
        pairs = []
        for tag, i1, i2, j1, j2 in ops:
            if tag == "insert":
                pairs += [((i1 + 1, i1 + 1), piece) for piece in _pieces(b, j1 + 1, j2 + 1)]
            elif tag == "delete":
                pairs += [(piece, (j1 + 1, j1 + 1)) for piece in _pieces(a, i1 + 1, i2 + 1)]
            elif tag == "replace":
                pairs.append(((i1 + 1, i2 + 1), (j1 + 1, j2 + 1)))
        for ra, rb in pairs:
            if a.code(*ra) == b.code(*rb):
                continue
            side, (lo, hi) = (b, rb) if b.code(*rb) else (a, ra)  # the side with code in it names the hunk
            first = next((i for i in range(lo, hi) if i in side.tokens), lo)  # its first line of code
            qualname = side.func.get(first, "<module>")
            shown = side.lines[first - 1].strip() if first <= len(side.lines) else ""
            hunks.append(
                Hunk(
                    rel,
                    ra,
                    rb,
                    qualname,
                    ("" if side is b else "- ") + shown[:80],
                    a.probe(*ra),
                    b.probe(*rb),
                    a.spans.get(qualname, frozenset()),
                    b.spans.get(qualname, frozenset()),
                )
            )
    return hunks


def load_lines(directory: Path, by: str = "vllm_version") -> dict[str, dict[str, LineSets]]:
    """The union of the drivers' line files in `directory`, per vLLM version (or per root: by="vllm_root")."""
    merged: dict[str, dict[str, tuple[set[int], set[int]]]] = {}
    for path in sorted(Path(directory).glob("lines-*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        files = merged.setdefault(str(doc[by]), {})
        for rel, sets in doc["files"].items():
            executed, statements = files.setdefault(rel, (set(), set()))
            executed.update(sets["executed"])
            statements.update(sets["statements"])
    return {
        key: {rel: LineSets(frozenset(e), frozenset(s)) for rel, (e, s) in files.items()}
        for key, files in merged.items()
    }


def reach(hunks: Iterable[Hunk], lines_a: dict[str, LineSets], lines_b: dict[str, LineSets]) -> list[HunkReach]:
    """For each hunk: did a line of A's run fall among its A lines, or of B's among its B lines (design notes)?"""
    none = LineSets(frozenset(), frozenset())
    out = []
    for h in hunks:
        ran_a, ran_b = lines_a.get(h.file, none).executed, lines_b.get(h.file, none).executed
        entered = bool(h.a_function & ran_a or h.b_function & ran_b)
        out.append(HunkReach(h, bool(h.a_probe & ran_a), bool(h.b_probe & ran_b), entered))
    return out


def unreached_json(reaches: Iterable[HunkReach]) -> dict[str, Any]:
    """The counts, and the unreached hunks grouped by file: a JSON-able dict."""
    reaches = list(reaches)
    by_file: dict[str, list[dict[str, Any]]] = {}
    for r in reaches:
        if not r.reached:
            h = r.hunk
            by_file.setdefault(h.file, []).append(
                {"a": list(h.a), "b": list(h.b), "qualname": h.qualname, "first_line": h.first_line, "why": r.status}
            )
    return {
        "hunks": len(reaches),
        "reached": sum(r.reached for r in reaches),
        "entered_not_reached": sum(r.status == ENTERED for r in reaches),
        "never_entered": sum(r.status == NEVER_ENTERED for r in reaches),
        "unreached": by_file,
    }


def unreached_markdown(reaches: Iterable[HunkReach]) -> list[str]:
    """Markdown lines: per file, each unreached hunk as its B lines, function and first changed line.

    In each file the hunks whose function was entered come first: they are the steering targets.
    """
    reaches = list(reaches)
    lines = [f"{sum(r.reached for r in reaches)} of {len(reaches)} changed scheduler hunks were reached."]
    by_file: dict[str, list[HunkReach]] = {}
    for r in reaches:
        if not r.reached:
            by_file.setdefault(r.hunk.file, []).append(r)
    for rel, rs in by_file.items():
        lines += ["", f"`{rel}`", ""]
        for r in sorted(rs, key=lambda r: (r.status != ENTERED, r.hunk.b)):
            h = r.hunk
            shown = h.first_line.replace("`", "'")
            lines.append(f"- `{h.where()}` `{h.qualname}` ({r.status}): `{shown}`")
    return lines
