"""`schedspec mutants`, CI-sized: a subset of the zoo through the fast checkers, with its table and heatmap.

The full matrix (every mutant, every checker) is in the README; this runs a
slice of it on every CI run so that the command, its exit code and its
files cannot rot, and pins the difference between a survival (a count used
up) and a search the safety cap cut short (unknown).
"""

import json

import pytest

from schedspec.cli import main


@pytest.mark.slow_ok("the mutants command end to end: its table, heatmap and exit code")
def test_a_subset_of_the_zoo_is_killed(tmp_path):
    out = tmp_path / "mutants"
    argv = ["mutants", "--checker", "monitors", "--checker", "z3", "--examples", "500", "--out", str(out)]
    # Z2 lives in async scheduling: its Z3 check is the feature run with async in the step.
    for name in (
        "Z10-admit-after-preemption",
        "Z13-length-before-stop",
        "Z14-double-free",
        "wrong-victim",
        "Z2-no-async-max-tokens-skip",
    ):
        argv += ["--mutant", name]
    assert main(argv) == 0
    kills = json.loads((out / "mutants.json").read_text())
    assert len(kills) == 10
    killed = {(k["mutant"], k["checker"]) for k in kills if k["killed"]}
    # Z14's double free lives in block-id bookkeeping, which the Z3 encoding abstracts to counts.
    assert {(k["mutant"], k["checker"]) for k in kills} - killed == {("Z14-double-free", "z3")}
    assert (out / "mutants.png").read_bytes()[:4] == b"\x89PNG"
    assert "| `wrong-victim` |" in (out / "mutants.md").read_text()


def test_a_survivor_fails_the_run(tmp_path, capsys):
    """Z5 needs a deeper pipeline than the engine loop's, so the monitors use up their count without a find: a real
    survival, and a monitors-only run must exit non-zero."""
    argv = ["mutants", "--checker", "monitors", "--examples", "60", "--mutant", "Z5-skipped-reversed"]
    assert main([*argv, "--out", str(tmp_path / "m")]) == 1
    (kill,) = json.loads((tmp_path / "m" / "mutants.json").read_text())
    assert kill["verdict"] == "survived" and kill["what"] == "no problem in 60 workloads" and kill["examples"] == 60
    assert "1 survived every checker (Z5-skipped-reversed)" in capsys.readouterr().err


def test_a_search_cut_short_by_the_safety_cap_is_unknown_never_survived(tmp_path, capsys):
    """Counts decide a verdict; the seconds cap only cuts a runaway search short, and that reads "budget spent"."""
    argv = ["mutants", "--checker", "monitors", "--mutant", "Z5-skipped-reversed", "--budget", "0.01"]
    assert main([*argv, "--out", str(tmp_path / "m")]) == 1
    (kill,) = json.loads((tmp_path / "m" / "mutants.json").read_text())
    assert kill["verdict"] == "unknown" and kill["what"].startswith("budget spent: ")
    assert "not killed before the budget was spent (Z5-skipped-reversed)" in capsys.readouterr().err
