"""Every `schedspec` command the README and docs/ show works as typed.

Each command line in a code block or an inline code span is taken as written. A line with a placeholder
(`FILE`, `E`, `...`, `[--out DIR]`) is a synopsis, and a bare `schedspec NAME` a mention; both are left to
`test_cli_help.py`. Every other command must parse with the real parser (its options exist, its choices are
valid), and the cheap ones run to exit status 0 from a fresh folder.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from schedspec.cli import build_parser

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDER = re.compile(r"\.\.\.|[<>\[\]|]|(?<![\w.-])[A-Z][A-Z_]*(?:\.json)?(?![\w-])")
# Run, not only parsed: quick, writing nothing, needing no vLLM venv.
CHEAP = ("simulate", "venvs --list", "mutants --show")


def _commands() -> list[tuple[str, list[str]]]:
    found: dict[str, tuple[str, list[str]]] = {}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        blocks = re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
        spans = re.findall(r"(?<!`)`([^`\n]+)`(?!`)", re.sub(r"```.*?```", "", text, flags=re.S))
        lines = [ln.split(" #")[0] for b in blocks for ln in b.splitlines()]  # a shell comment is not typed
        for line in lines + spans:
            for part in line.split("&&"):
                words = part.strip().split()
                while words and "=" in words[0]:  # PYTHONPATH=... schedspec ...
                    words = words[1:]
                if not words or Path(words[0]).name != "schedspec":
                    continue
                command = " ".join(words[1:])
                argv = shlex.split(command)
                if len(argv) > 1 and not PLACEHOLDER.search(command) and not _names_an_option(argv):
                    found.setdefault(command, (page.name, argv))
    return sorted(found.values(), key=lambda c: c[1])


def _names_an_option(argv: list[str]) -> bool:
    """`schedspec mutants --from` in a sentence: an option that takes a value, named without one."""
    if len(argv) != 2 or not argv[1].startswith("--"):
        return False
    (sub,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    action = sub.choices[argv[0]]._option_string_actions.get(argv[1]) if argv[0] in sub.choices else None
    return action is not None and action.nargs != 0


COMMANDS = _commands()


def test_the_docs_show_commands() -> None:
    assert len(COMMANDS) > 20 and any(argv[0] == "simulate" for _, argv in COMMANDS)


@pytest.mark.parametrize("page, argv", COMMANDS, ids=[" ".join(a)[:60] for _, a in COMMANDS])
def test_a_documented_command_parses(page: str, argv: list[str]) -> None:
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"{page}: `schedspec {' '.join(argv)}` does not parse (exit {e.code})")


@pytest.mark.parametrize(
    "page, argv",
    [c for c in COMMANDS if " ".join(c[1]).startswith(CHEAP)],
    ids=lambda x: " ".join(x) if isinstance(x, list) else x,
)
def test_a_cheap_documented_command_runs(page: str, argv: list[str], tmp_path: Path) -> None:
    schedspec = Path(sys.executable).with_name("schedspec")
    done = subprocess.run([str(schedspec), *argv], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{page}: `schedspec {' '.join(argv)}` exited {done.returncode}: {done.stderr[-500:]}"


def _pytest_lines() -> list[tuple[str, list[str]]]:
    """`.venv/bin/python -m pytest examples/...` as the docs show it (not the whole suite's own command)."""
    found = []
    for page in PAGES:
        for span in re.findall(r"`(\.venv/bin/python -m pytest [^`]+)`", page.read_text(encoding="utf-8")):
            argv = shlex.split(span)[3:]
            if any(a.startswith("examples/") for a in argv):
                found.append((page.name, argv))
    return found


@pytest.mark.parametrize("page, argv", _pytest_lines(), ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_a_documented_example_test_passes_as_typed(page: str, argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{page}: `pytest {' '.join(argv)}`: {done.stdout[-800:]}"


def test_every_picture_the_docs_show_exists() -> None:
    shown = [
        (page.name, page.parent / target)
        for page in PAGES
        # outside code blocks: a quoted certificate names its pictures relative to its own folder
        for target in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", re.sub(r"```.*?```", "", page.read_text(), flags=re.S))
    ]
    assert shown and all(path.is_file() for _, path in shown), [s for s in shown if not s[1].is_file()]
