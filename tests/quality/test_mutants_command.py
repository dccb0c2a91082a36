"""`schedspec mutants`, CI-sized: a subset of the zoo through the fast checkers, with its table and heatmap.

The full matrix (every mutant, every checker) is in the README; this runs a
slice of it on every CI run so that the command, its exit code and its
files cannot rot.
"""

import json

from schedspec.cli import main


def test_a_subset_of_the_zoo_is_killed(tmp_path):
    out = tmp_path / "mutants"
    argv = ["mutants", "--checker", "monitors", "--checker", "z3", "--budget", "30", "--out", str(out)]
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


def test_a_survivor_fails_the_run(tmp_path):
    """The diff-only mutant survives the monitors, so a monitors-only run must exit non-zero."""
    argv = [
        "mutants",
        "--checker",
        "monitors",
        "--budget",
        "3",
        "--mutant",
        "priority-self-preempt-breaks",
        "--out",
        str(tmp_path / "m"),
    ]
    assert main(argv) == 1
