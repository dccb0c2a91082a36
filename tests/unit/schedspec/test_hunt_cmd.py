"""`schedspec hunt`: the lock-step state machine against any engine, its outputs and its exit codes.

0: nothing in the examples; 1: a divergence, broken invariant or crash, shrunk and written as a counterexample
that `schedspec replay` reads; 2: bad input, one line naming the option; 3: the engine failed as a program.
"""

from __future__ import annotations

import json

import pytest

from schedspec.cli import main
from schedspec.spec.workload import Workload

PLANTED = "schedspec.conformance.demo_engines.mutant_engines:"


def test_the_reference_against_itself_finds_nothing(tmp_path, capsys):
    out = tmp_path / "h"
    assert main(["hunt", "--engine", "reference", "--examples", "40", "--out", str(out)]) == 0
    summary = json.loads((out / "hunt.json").read_text())
    assert summary["verdict"] == "passed" and summary["examples"] == 40 and summary["scope"] == "full"
    assert not (out / "counterexample.json").exists()
    assert main(["hunt", "--engine", "reference", "--examples", "5", "--out", str(out)]) == 2  # no --force
    assert main(["hunt", "--engine", "reference", "--examples", "5", "--core", "--out", str(out), "--force"]) == 0


def test_a_planted_mutant_is_found_shrunk_and_replays(tmp_path, capsys):
    out = tmp_path / "h"
    assert main(["hunt", "--engine", PLANTED + "Z14-double-free", "--examples", "50", "--out", str(out)]) == 1
    summary = json.loads((out / "hunt.json").read_text())
    assert summary["verdict"] == "failed" and summary["size"] == {"requests": 1, "steps": 1}
    assert summary["divergence"]["field"] == "state.num_free_blocks"
    assert len(Workload.from_json(json.loads((out / "workload.json").read_text())).requests) == 1
    capsys.readouterr()
    assert main(["replay", str(out / "counterexample.json")]) == 1
    shown = capsys.readouterr().out
    assert "diverges at step 0: state.num_free_blocks" in shown and "block-conservation" in shown


def test_a_crash_of_the_engine_is_a_finding(tmp_path):
    out = tmp_path / "h"
    engine = "schedspec.conformance.demo_engines.planted:crashing"
    assert main(["hunt", "--engine", engine, "--examples", "20", "--core", "--out", str(out)]) == 1
    summary = json.loads((out / "hunt.json").read_text())
    assert summary["what"] == "crash" and summary["divergence"]["field"] == "engine b"
    assert main(["replay", str(out / "counterexample.json")]) == 1


@pytest.mark.parametrize(
    "engine,extra,kind",
    [
        ("schedspec.conformance.demo_engines.planted:hanging", ["--step-timeout", "1"], "timeout"),
        ("schedspec.conformance.demo_engines.planted:malformed", [], "malformed"),
    ],
)
def test_an_engine_failing_as_a_program_is_exit_3_and_never_shrunk(tmp_path, capsys, engine, extra, kind):
    out = tmp_path / "h"
    assert main(["hunt", "--engine", engine, "--examples", "20", "--core", *extra, "--out", str(out)]) == 3
    summary = json.loads((out / "hunt.json").read_text())
    assert summary["verdict"] == "error" and summary["error"]["kind"] == kind
    assert not (out / "counterexample.json").exists()
    assert "fix:" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,option",
    [
        (["--engine", "reference", "--examples", "0"], "--examples"),
        (["--engine", "reference", "--level", "bytes"], "--level"),
        (["--engine", "reference", "--seed", "-1"], "--seed"),
        (["--engine", "reference", "--step-timeout", "nan"], "--step-timeout"),
        (["--engine", "nosuchengine"], "--engine"),
        (["--engine", "no_such_module_xyz:make"], "--engine"),
    ],
)
def test_bad_input_is_one_line_naming_the_option(tmp_path, capsys, argv, option):
    assert main(["hunt", *argv, "--out", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"schedspec: error: {option}"), err
