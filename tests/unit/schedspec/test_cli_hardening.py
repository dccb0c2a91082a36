"""`prove`, `contracts` and `mutants`: bad input fails in one line before the work, outputs are never clobbered
without `--force`, a cut search or a Z3 timeout never passes, and progress shows as it happens.

Each command here runs its cheapest real case (one check, one contract at 0.01 CPU-s, one mutant on the
monitors), so the whole file takes about 15 s; only the exit-code arithmetic is tested on planted results.
"""

import json
import os

import pytest

from schedspec.cli import main, mutants as mutants_cmd
from schedspec.kill_matrix import BUDGET_SPENT, Kill
from schedspec.proofs.runs import prove
from schedspec.spec.invariants import BY_NAME

PROVE = ["prove", "--max-requests", "1", "--policy", "fcfs", "--invariant", "seqs-limit"]
PROVE_VIOLATED = [
    "prove",
    "--max-requests",
    "1",
    "--policy",
    "fcfs",
    "--invariant",
    "budget-conservation",
    "--mutant",
    "budget-off-by-one",
]
CX = "proof-fcfs-budget-conservation-N1.json"
MUTANTS = ["mutants", "--mutant", "budget-off-by-one", "--checker", "monitors", "--budget", "5"]
CONTRACTS = ["contracts", "--contract", "one-place", "--timeout", "0.01"]


def one_line_error(capsys, option: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"schedspec: error: {option}: "), err
    return lines[0]


@pytest.mark.parametrize(
    "argv, option",
    [
        *[(["prove", "--timeout", t], "--timeout") for t in ("0", "-1", "1e-9", "nan", "inf", "1e7")],
        (["prove", "--jobs", "0"], "--jobs"),
        (["prove", "--max-requests", "0"], "--max-requests"),
        (["prove", "--invariant", "nope"], "--invariant"),
        *[(["contracts", "--timeout", t], "--timeout") for t in ("0", "-1", "nan", "inf")],
        (["contracts", "--jobs", "0"], "--jobs"),
        *[(["mutants", "--budget", b], "--budget") for b in ("0", "-5", "nan", "inf")],
        (["mutants", "--jobs", "0"], "--jobs"),
        (["mutants", "--checker", "nope"], "--checker"),
        (["mutants", "--mutant", "nope"], "--mutant"),
        *[(["mutants", "--examples", n], "--examples") for n in ("0", "-3")],
        (["mutants", "--rlimit", "0"], "--rlimit"),
        (["mutants", "--from", "no_such_module_xyz"], "--from"),
        (["hunt", "--engine", "reference", "--examples", "0"], "--examples"),
        (["hunt", "--engine", "reference", "--level", "bytes"], "--level"),
    ],
)
def test_bad_argument_is_one_line_and_exit_2_before_anything_is_written(argv, option, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default --out folders would land here
    assert main(argv) == 2
    one_line_error(capsys, option)
    assert os.listdir(tmp_path) == []


def test_an_unknown_invariant_lists_the_known_ones(capsys):
    assert main(["prove", "--invariant", "nope"]) == 2
    assert "seqs-limit" in one_line_error(capsys, "--invariant")


@pytest.mark.parametrize("argv", [PROVE, MUTANTS, CONTRACTS], ids=["prove", "mutants", "contracts"])
def test_an_out_that_cannot_be_a_folder_fails_up_front(argv, tmp_path, capsys):
    a_file = tmp_path / "a-file"
    a_file.write_text("the user's\n")
    for out in (a_file, a_file / "sub"):  # a path under a file cannot be created, even by root
        assert main([*argv, "--out", str(out)]) == 2
        one_line_error(capsys, "--out")  # and no progress line: the work never started
    assert a_file.read_text() == "the user's\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod 0o500")
def test_an_unwritable_out_fails_up_front(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert main([*PROVE, "--out", str(locked)]) == 2
    assert "not writable" in one_line_error(capsys, "--out")


def test_mutants_refuses_an_earlier_run_without_force_and_replaces_it_with(tmp_path, capsys):
    out = tmp_path / "m"
    assert main([*MUTANTS, "--out", str(out)]) == 0
    assert "mutants: 1/1 cells done, 1 killed" in capsys.readouterr().err
    (out / "notes.md").write_text("mine\n")
    before = (out / "mutants.json").stat().st_mtime_ns
    assert main([*MUTANTS, "--out", str(out)]) == 2
    assert "--force" in one_line_error(capsys, "--out")
    assert (out / "mutants.json").stat().st_mtime_ns == before
    assert main([*MUTANTS, "--out", str(out), "--force"]) == 0
    kills = json.loads((out / "mutants.json").read_text())
    assert [k["verdict"] for k in kills] == ["killed"]
    assert (out / "notes.md").read_text() == "mine\n"  # not ours: left alone


def test_prove_force_clears_a_stale_counterexample_and_a_clean_run_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "p"
    assert main([*PROVE, "--out", str(out)]) == 0
    assert not out.exists()  # nothing failed, so no folder is left behind
    assert main([*PROVE_VIOLATED, "--out", str(out)]) == 1
    assert (out / CX).exists()
    capsys.readouterr()
    assert main([*PROVE, "--out", str(out)]) == 2  # the earlier counterexample is not replaced silently
    one_line_error(capsys, "--out")
    assert main([*PROVE, "--out", str(out), "--force"]) == 0
    assert not (out / CX).exists()  # a clean run never sits beside a stale counterexample
    assert main([*PROVE, "--out", str(out)]) == 0  # and it recorded that it wrote nothing


def test_prove_refuses_to_overwrite_a_counterexample_file_it_did_not_write(tmp_path, capsys):
    (tmp_path / CX).write_text("{}\n")
    assert main([*PROVE_VIOLATED, "--out", str(tmp_path)]) == 2
    assert CX in one_line_error(capsys, "--out")
    assert (tmp_path / CX).read_text() == "{}\n"


def test_contracts_out_is_refused_without_force_and_replaced_with(tmp_path, capsys):
    assert main([*CONTRACTS, "--out", str(tmp_path)]) == 0
    assert "contracts: 1/1 contracts done" in capsys.readouterr().err
    assert main([*CONTRACTS, "--out", str(tmp_path)]) == 2
    one_line_error(capsys, "--out")
    assert main([*CONTRACTS, "--out", str(tmp_path), "--force"]) == 0
    assert json.loads((tmp_path / "results.json").read_text())["results"][0]["verdict"] == "unknown"


def test_a_z3_timeout_is_unknown_never_proved():
    # N = 8 takes seconds to prove; each query gets 50 ms at the least, still far short.
    assert prove.check(BY_NAME["block-conservation"], 8, True, timeout_s=0.01).verdict == "unknown"


def test_prove_fails_on_unknown_unless_allowed(tmp_path, capsys):
    argv = [
        "prove",
        "--max-requests",
        "8",
        "--policy",
        "fcfs",
        "--invariant",
        "block-conservation",
        "--timeout",
        "0.01",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 1
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert "prove: unknown: block-conservation at N=8 (fcfs)" in err[-3]  # live, before the row's line
    assert err[-1].startswith("prove: FAILED: ") and "unknown" in err[-1] and "--allow-unknown" in err[-1]
    assert main([*argv, "--allow-unknown"]) == 0
    assert "accepted (--allow-unknown)" in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "verdicts, allow, rc, says",
    [
        (["proved", "proved"], False, 0, None),
        (["proved", "unknown"], False, 1, "1 check unknown"),
        (["unknown", "unknown"], True, 0, "accepted"),
        (["violated", "unknown"], True, 1, "1 check violated"),
        (["unconfirmed", "proved"], True, 1, "1 check unconfirmed"),
    ],
)
def test_prove_exit_status(verdicts, allow, rc, says, tmp_path, capsys, monkeypatch):
    planted = iter(verdicts)
    monkeypatch.setattr(prove, "run_job", lambda job: prove.Result(job.invariant, job.n, "fcfs", next(planted), 0.0))
    argv = ["prove", "--max-requests", "2", "--policy", "fcfs", "--invariant", "seqs-limit", "--out", str(tmp_path)]
    monkeypatch.setattr("schedspec.proofs.runs.report.write_state_counterexample", lambda *a: open(a[0], "w").close())
    assert main([*argv, *(["--allow-unknown"] if allow else [])]) == rc
    err = capsys.readouterr().err
    assert "prove: fcfs N=2 finished" in err and "2/2 checks done" in err
    if says:
        assert says in err.strip().splitlines()[-1]


def test_a_search_cut_by_the_budget_is_unknown_and_fails_apart_from_a_survivor(tmp_path, capsys):
    # The monitors cannot see this mutant (it needs a deeper pipeline than the engine loop's), so the search would
    # use up its 1000 workloads; the 1 s safety cap cuts it short first, and that is unknown, never survived.
    assert (
        main(
            [
                "mutants",
                "--mutant",
                "Z5-skipped-reversed",
                "--checker",
                "monitors",
                "--budget",
                "1",
                "--out",
                str(tmp_path),
            ]
        )
        == 1
    )
    captured = capsys.readouterr()
    [kill] = json.loads((tmp_path / "mutants.json").read_text())
    assert kill["what"].startswith(BUDGET_SPENT) and kill["verdict"] == "unknown"
    assert "survived every checker" not in captured.out and "not killed, budget spent" in captured.out
    assert "budget was spent" in captured.err.strip().splitlines()[-1]
    assert "| `Z5-skipped-reversed` | Z5 | budget spent |" in (tmp_path / "mutants.md").read_text()


def test_a_real_survivor_and_a_cut_search_are_told_apart(capsys):
    from rich.console import Console

    def cell(name, checker, what):
        return Kill(name, checker, False, what, 1.0, None)

    by = {
        ("a", "z3"): cell("a", "z3", "proved up to N=3"),
        ("a", "monitors"): cell("a", "monitors", BUDGET_SPENT),
        ("b", "z3"): cell("b", "z3", "proved up to N=3"),
        ("b", "monitors"): cell("b", "monitors", "unknown: 2 checks not proved (timeout or unconfirmed)"),
    }
    assert [k.verdict for k in by.values()] == ["survived", "unknown", "survived", "unknown"]
    assert mutants_cmd.run_verdict(["a", "b"], by, ["z3", "monitors"], Console()) == 1
    assert "2 not killed before the budget was spent" in capsys.readouterr().err
    solid = {
        ("a", "z3"): cell("a", "z3", "proved up to N=3"),
        ("a", "crosshair"): cell("a", "crosshair", "no counterexample within bounds"),
    }
    assert mutants_cmd.run_verdict(["a"], solid, ["z3", "crosshair"], Console()) == 1
    captured = capsys.readouterr()
    assert "survived every checker: a" in captured.out and "1 survived every checker" in captured.err


def test_prove_progress_is_live_with_a_pool(tmp_path, capsys):
    assert (
        main(
            [
                "prove",
                "--max-requests",
                "2",
                "--policy",
                "fcfs",
                "--invariant",
                "seqs-limit",
                "--invariant",
                "one-place",
                "--jobs",
                "2",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err.strip().splitlines()
    # Rows usually finish in order, but a worker that starts late can take N=1's last check after N=2's.
    assert sorted(line.split(" finished")[0] for line in err) == ["prove: fcfs N=1", "prove: fcfs N=2"]
    assert err[-1].endswith("4/4 checks done, 0 violated, 0 unknown")
