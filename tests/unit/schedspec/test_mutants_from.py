"""`schedspec mutants --from MODULE`: your own mutants, engines derived from the reference, scored by every checker
that takes an engine (`conformance/search/user_mutants.py`, `examples/my_mutants/my_mutants.py`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from schedspec.cli import main

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "my_mutants"


@pytest.fixture
def on_path(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m in ("my_mutants", "bad_mutants", "no_engines")]:
        del sys.modules[name]


@pytest.mark.slow_ok("a user's mutant module scored end to end by the monitors and the differ")
def test_the_example_module_is_scored_by_the_engine_checkers(on_path, monkeypatch):
    # The differ's kills are checked against the real vLLM too where its venv exists: a driver start each, not
    # what this test is about.
    monkeypatch.setattr("schedspec.conformance.engines.vllm.vllm_venv_ready", lambda: False)
    out = on_path / "m"
    argv = ["mutants", "--from", "my_mutants", "--examples", "100", "--out", str(out)]
    for name in ("min-tokens-holds-eos", "cached-blocks-first"):
        argv += ["--mutant", name]
    assert main(argv) == 0
    kills = json.loads((out / "mutants.json").read_text())
    assert {(k["mutant"], k["checker"]) for k in kills} == {
        (m, c) for m in ("min-tokens-holds-eos", "cached-blocks-first") for c in ("monitors", "diff", "hypothesis")
    }
    by = {(k["mutant"], k["checker"]): k for k in kills}
    assert by[("min-tokens-holds-eos", "monitors")]["what"] == "stop-token-finishes"
    # Which block is reused shows in block ids, which the differ and the lock-step machine compare.
    assert by[("cached-blocks-first", "diff")]["killed"] and by[("cached-blocks-first", "hypothesis")]["killed"]
    assert "| `cached-blocks-first` | my_mutants |" in (out / "mutants.md").read_text()


def test_an_engine_no_checker_kills_fails_the_run_unless_argued(on_path, capsys):
    (on_path / "bad_mutants.py").write_text(
        "from schedspec.reference_impl import Scheduler, derived_engine\n"
        "class Same(Scheduler):\n    '''Changes nothing.'''\n"
        "ENGINES = {'same': derived_engine(Same)}\n"
    )
    argv = ["mutants", "--from", "bad_mutants", "--examples", "20", "--checker", "diff", "--out", str(on_path / "a")]
    assert main(argv) == 1
    assert "1 survived every checker (same)" in capsys.readouterr().err
    with open(on_path / "bad_mutants.py", "a") as f:
        f.write("EQUIVALENT = {'same': 'it overrides nothing'}\n")
    del sys.modules["bad_mutants"]
    assert main([*argv[:-1], str(on_path / "b")]) == 0


@pytest.mark.parametrize(
    "source,extra,why",
    [
        ("no_such_module_here", [], "cannot be imported"),
        ("no_engines", [], "has no ENGINES dict"),
        ("my_mutants", ["--checker", "z3"], "cannot take an engine"),
        ("my_mutants", ["--mutant", "Z1-no-refund"], "is not a mutant in my_mutants.ENGINES"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(on_path, capsys, source, extra, why):
    (on_path / "no_engines.py").write_text("X = 1\n")
    assert main(["mutants", "--from", source, *extra, "--out", str(on_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("schedspec: error: --") and why in err[0], err
