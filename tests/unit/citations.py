"""Resolve the project's citations: ids against docs/glossary.md, vLLM places against vLLM 0.33.0's source.

Why this exists: comments cited `scheduler.py:1579` and `§9.A.4`, which a
clone could not resolve (the ids lived in documents outside the repository)
and which drifted as nobody checked them (lines off by a few, methods
credited to the wrong file). docs/glossary.md is now the one home of every
id, and a vLLM citation names a function, so both can be checked:

* an id (`§3.1`, `I-14`, `T41`, `D1`, `P1`, `exp1`, `Z6`) must have an entry
  in the glossary;
* `vllm/<path>.py:<Qualified.name> (<lines>)` must name a file of the
  installed vLLM 0.33.0, a class, function or module-level name in it (found
  with `ast`, never by importing vLLM), and lines inside that definition.

The file lists are what git tracks or would track, so a clone and a working
tree scan the same files. In .py files only comments and string literals are
scanned: code such as `T0 = ...` or `P1: list` is not a citation.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GLOSSARY = REPO / "docs" / "glossary.md"

# One form for every vLLM citation; see "How to cite" in docs/glossary.md.
VLLM_CITATION = re.compile(
    r"\bvllm/(?P<path>[\w/]+\.py):(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)"
    r"(?: \((?P<lines>\d+(?:-\d+)?(?:, \d+(?:-\d+)?)*)\))?"
)
# The forms it replaced: a file and line numbers, and bare line numbers (`(:1331)`) leaning on a file
# named earlier. Neither names a function, so neither can be checked; both are refused.
OLD_CITATION = re.compile(r"(?<![\w/.])(?P<path>(?:[\w.]+/)*\w+\.py):\d+")
BARE_LINES = re.compile(r"(?<![\w\])[/.:'\"{])(?<!\[):\d{2,}(?:-\d+)?\b")
# The project's ids. A T scenario may carry a case letter (T54c is T54, case c); ranges (T7-T11) cite both ends.
ID_PATTERNS = {
    "section": r"§\d+[a-z]?(?:\.[A-Z]\.\d+|\.\d+)*",
    "invariant": r"\bI-\d+\b",
    "scenario": r"\bT\d+(?=[a-z]?\b)",
    "observed": r"\b(?:D\d+|P\d+|exp\d+)\b",
    "bug": r"\bZ\d+\b",
}
ID_RE = re.compile("|".join(f"(?:{p})" for p in ID_PATTERNS.values()))
# An entry is a bullet that opens with its id in bold; bold words with spaces or a final period are prose.
GLOSSARY_ENTRY = re.compile(r"^- \*\*(?P<id>[^*\s]*[^*\s.])\*\*", re.MULTILINE)

# Text that looks like a citation and is not one, with why. Matched by (file, exact text).
NOT_CITATIONS = {
    ("tests/unit/proofs/test_contracts.py", "Z99"): "a mutant id that must not exist: the CLI's refusal is under test",
    (
        "tests/unit/conformance/engines/test_vllm_known_bugs.py",
        "vllm/v1/core/sched/scheduler.py:1579",
    ): "the traceback vLLM prints, matched verbatim",
    ("docs/conformance.md", "vllm/v1/core/sched/scheduler.py:1579"): "quotes that traceback",
    ("tests/unit/proofs/test_contracts.py", "/x/contracts.py:76"): "CrossHair's report format, fed to the parser",
}
SKIP = NOT_CITATIONS.keys()
# The checker and its test hold deliberate mistakes and the patterns themselves.
SELF = {"tests/unit/citations.py", "tests/unit/project/test_glossary.py"}


@dataclass(frozen=True)
class Cited:
    file: str  # relative to the repository
    line: int
    text: str


def project_files() -> list[str]:
    """The .py and .md files a clone has (tracked, or new and not ignored), the checker excepted."""
    out = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard"], capture_output=True, text=True, check=True
    ).stdout
    return sorted(f for f in out.splitlines() if f.endswith((".py", ".md")) and f not in SELF and (REPO / f).is_file())


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of what may cite: every line of Markdown, the comments and strings of Python."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        return list(enumerate(text.splitlines(), 1))
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.STRING):
            for i, part in enumerate(tok.string.splitlines()):
                out.append((tok.start[0] + i, part))
    return out


def scan(pattern: re.Pattern[str], files: list[str] | None = None) -> list[Cited]:
    found = []
    for f in project_files() if files is None else files:
        for line, text in prose(REPO / f):
            found += [Cited(f, line, m.group(0)) for m in pattern.finditer(text) if (f, m.group(0)) not in SKIP]
    return found


def glossary_ids(text: str | None = None) -> set[str]:
    """The ids the glossary defines (one `- **ID**` entry each); `text` stands in for the file in tests."""
    text = GLOSSARY.read_text(encoding="utf-8") if text is None else text
    return {m.group("id") for m in GLOSSARY_ENTRY.finditer(text)}


def undefined_ids(cited: list[Cited], defined: set[str]) -> list[Cited]:
    return [c for c in cited if c.text not in defined]


# ---- vLLM citations ----------------------------------------------------------------------------


def vllm_root() -> Path | None:
    """The `vllm/` package of the reference venv (built by conformance/vllm_env/setup_vllm_ref.sh), if ready."""
    from schedspec.conformance.engines.vllm import vllm_venv_path, vllm_venv_ready

    if not vllm_venv_ready():
        return None
    return next((vllm_venv_path() / "lib").glob("python3*/site-packages/vllm"), None)


@cache
def definitions(path: Path) -> dict[str, tuple[int, int]]:
    """Qualified name -> (first, last) line of every class and function, module constant and class field.

    A function's locals are not names one can cite, so a function body contributes only nested defs.
    The span starts at the first decorator: `@property` is part of what a citation of it points at.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    spans: dict[str, tuple[int, int]] = {}

    def walk(body: list[ast.stmt], prefix: str, fields: bool) -> None:
        for node in body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                spans.setdefault(prefix + node.name, (first, node.end_lineno or node.lineno))
                walk(node.body, prefix + node.name + ".", isinstance(node, ast.ClassDef))
            elif fields and isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        spans.setdefault(prefix + t.id, (node.lineno, node.end_lineno or node.lineno))

    walk(tree.body, "", True)
    return spans


def parse_lines(lines: str | None) -> list[tuple[int, int]]:
    if not lines:
        return []
    out = []
    for part in lines.split(", "):
        first, _, last = part.partition("-")
        out.append((int(first), int(last or first)))
    return out


def citation_problem(text: str, root: Path) -> str | None:
    """Why `text` (one vLLM citation) does not resolve under `root`; None when it does."""
    m = VLLM_CITATION.fullmatch(text)
    if m is None:
        return f"not of the form vllm/<path>.py:<name> (<lines>): {text!r}"
    source = root / m.group("path")
    if not source.is_file():
        return f"no file vllm/{m.group('path')} in vLLM 0.33.0"
    span = definitions(source).get(m.group("name"))
    if span is None:
        return f"no class, function or module-level name {m.group('name')} in vllm/{m.group('path')}"
    for first, last in parse_lines(m.group("lines")):
        if not (span[0] <= first <= last <= span[1]):
            return f"lines {first}-{last} lie outside {m.group('name')} ({span[0]}-{span[1]})"
    return None


def old_form_problem(text: str) -> str | None:
    """Why `text` is refused: bare line numbers, or a file:line naming no file of this repository.

    The project's own files may still be cited by line; anything else is vLLM's (or a typo) and must
    use the checkable form. Deciding this needs no vLLM, so the check runs on every machine.
    """
    m = OLD_CITATION.fullmatch(text)
    if m is not None and (REPO / m.group("path")).is_file():
        return None
    return f"{text!r}: cite vLLM as vllm/<path>.py:<name> (<lines>)"


def problems(pattern: re.Pattern[str], check: Callable[[str], str | None]) -> list[tuple[Cited, str]]:
    """Every citation `pattern` finds in the project's prose that `check` refuses, with why."""
    return [(c, why) for c in scan(pattern) if (why := check(c.text)) is not None]
