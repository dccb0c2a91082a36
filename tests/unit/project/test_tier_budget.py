"""The default tier's exceptions are written down: every test marked `slow_ok` is named in tests/README.md.

Nothing here is timed. The marks are read from pytest's own collection of
the default tier (`--collect-only`, so a mark on one parametrized case counts
as well as one on the function), and the list from the README's section
"Default-tier tests over 10 s". Both directions are checked: a mark with no
entry (a slow test that slipped in unexplained) and an entry with no mark (a
list that outlived its test). Which tests are over 10 s is the run's own
report (`tests/conftest.py:pytest_terminal_summary`), since that depends on
the machine.
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "tests" / "README.md"
SECTION = "## Default-tier tests over 10 s"


def listed(readme: str) -> set[str]:
    """The tests the README's section names: `tests/...py::test_name`, each at the start of a table row."""
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(tests/[\w/]+\.py::\w+)`", section, re.M))


def marked() -> set[str]:
    """The default-tier tests carrying `slow_ok`, as `file::function` (a parametrized test once)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow_ok and not slow"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line.split("[")[0] for line in done.stdout.splitlines() if "::" in line}


def problems(marks: set[str], names: set[str]) -> list[str]:
    return [f"{t} is marked slow_ok but not named in tests/README.md" for t in sorted(marks - names)] + [
        f"{t} is named in tests/README.md but not marked slow_ok" for t in sorted(names - marks)
    ]


def test_every_slow_ok_test_is_named_in_the_tests_readme():
    marks, names = marked(), listed(README.read_text())
    assert marks, "no slow_ok test collected: the mark or the collection is broken"
    assert not problems(marks, names), "\n".join(problems(marks, names))


def test_the_check_catches_an_unlisted_test_and_a_stale_entry():
    readme = README.read_text()
    names = listed(readme)
    some = sorted(names)[0]
    dropped = readme.replace(f"| `{some}`", "| dropped", 1)
    assert problems(names, listed(dropped)) == [f"{some} is marked slow_ok but not named in tests/README.md"]
    stale = names | {"tests/unit/test_gone.py::test_gone"}
    assert problems(names, stale) == [
        "tests/unit/test_gone.py::test_gone is named in tests/README.md but not marked slow_ok"
    ]
