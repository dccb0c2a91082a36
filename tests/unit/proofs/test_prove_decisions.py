"""`schedspec prove` on the decision invariants' row forms (spec/invariants/decision_rows.py).

The row forms are proved like the catalogue: Z3 refutes every step of N
symbolic requests that breaks one, one count of running requests at a time
(`prove._cases`). Z3 work units (`rlimit`), not seconds, decide each verdict here.
"""

from __future__ import annotations

import pytest

from schedspec.cli import main
from schedspec.conformance.search.budget import DEFAULT_Z3_RLIMIT, z3_rlimit
from schedspec.proofs.runs.prove import check
from schedspec.spec.invariants import DECISION_ROWS, INVARIANTS


@pytest.fixture(autouse=True)
def _counted():
    with z3_rlimit(DEFAULT_Z3_RLIMIT):
        yield


@pytest.mark.parametrize("fcfs", [True, False], ids=["fcfs", "priority"])
@pytest.mark.parametrize("inv", DECISION_ROWS, ids=lambda i: i.name)
def test_each_row_form_is_proved_for_up_to_three_requests(inv, fcfs):
    for n in (1, 2, 3):
        r = check(inv, n, fcfs, timeout_s=120, reuse=True)
        assert r.verdict == "proved", r


def test_prove_decisions_prints_both_tables_and_what_z3_cannot_state(tmp_path, capsys):
    assert main(["prove", "--decisions", "--max-requests", "2", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "24 checks in" in out and "24 proved" in out
    assert all(inv.name in out for inv in DECISION_ROWS)
    assert "prefix-hit-exact, block-choice-exact: n/a in Z3" in out
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "argv, field, value",
    [
        (["--invariant", "prefix-hit-exact"], "--invariant", "prefix-hit-exact"),
        (["--invariant", "grant-exact", "--feature", "async"], "--invariant", "grant-exact"),
        (["--decisions", "--feature", "spec-decode"], "--feature", "spec-decode"),
        (["--decisions", "--every-n"], "--every-n", "--decisions"),
        (["--invariant", "nope"], "--invariant", "grant-exact"),  # the choices are listed, decisions included
    ],
)
def test_bad_decision_arguments_are_one_line_errors(tmp_path, capsys, argv, field, value):
    out = tmp_path / "o"
    assert main(["prove", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert field in err and value in err and "Traceback" not in err
    assert not out.exists()


def test_the_default_run_adds_the_decisions_up_to_three_requests(tmp_path, capsys, monkeypatch):
    """The plumbing of the default run, with every check answered at once: the catalogue for N <= 8, then the six
    row forms for N <= 3 (a `-` beyond), then the proofs for every N."""
    from schedspec.proofs.runs import every_n, prove

    ran = []

    def answered(job):
        ran.append((job.invariant, job.n))
        return prove.Result(job.invariant, job.n, "fcfs" if job.fcfs else "priority", "proved", 0.0)

    monkeypatch.setattr(prove, "run_job", answered)
    monkeypatch.setattr(every_n, "run", lambda names, policies, *a: [])
    assert main(["prove", "--policy", "fcfs", "--out", str(tmp_path / "o")]) == 0
    decisions = {(name, n) for name, n in ran if name in {inv.name for inv in DECISION_ROWS}}
    assert decisions == {(inv.name, n) for inv in DECISION_ROWS for n in (1, 2, 3)}
    assert len(ran) - len(decisions) == len(INVARIANTS) * 8
    out = capsys.readouterr().out
    assert "grant-exact" in out and "prefix-hit-exact, block-choice-exact: n/a in Z3" in out
