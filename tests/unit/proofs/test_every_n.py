"""The proofs for every N (`proofs/runs/every_n.py`): proved, not vacuous, and stating the catalogue's invariants.

The lemmas speak of one request (two, for a frame or a pair) and a step's
globals, so what they prove must be what the catalogue states of N rows:

* a per-request state invariant the pre-state is assumed to satisfy (PER_REQUEST)
  must be a conjunction over rows: on two requests, it holds iff it holds of each;
* a sum (budget, blocks) read on x beside one lumped row must be the sum over the rows.

Both are checked here with Z3 on symbolic two- and three-request states.
"""

import contextlib
import dataclasses

import pytest
import z3

from schedspec.conformance.search.budget import DEFAULT_Z3_RLIMIT, z3_rlimit
from schedspec.mutants import BY_NAME as MUTANTS, applied
from schedspec.proofs.encoding.state import Pre
from schedspec.proofs.encoding.step import step
from schedspec.proofs.encoding.symbolic import fresh, state_view, step_view, well_formed
from schedspec.proofs.runs import every_n, every_n_loop
from schedspec.proofs.runs.prove import BLOCK_SIZE
from schedspec.spec.invariants.catalogue import BY_NAME


@pytest.fixture(autouse=True)
def _counted():
    """Z3 work units per query (`rlimit`), not seconds, decide every verdict here: the same on a loaded machine.
    The timeouts are only a safety cap; a query at either limit is `unknown`, which fails the assertions."""
    with z3_rlimit(DEFAULT_Z3_RLIMIT):
        yield


def _valid(claim, facts=()):
    s = z3.Solver()
    s.set("timeout", 60_000)
    s.add(*facts, z3.Not(claim))
    return s.check() == z3.unsat


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_each_is_proved_for_every_n(policy):
    results = every_n.run(policies=[policy])
    assert [r.invariant for r in results] == list(every_n.EVERY_N)
    for r in results:
        if every_n.POLICY_ONLY.get(r.invariant, policy) != policy:
            assert r.verdict == "n/a", r
            continue
        assert r.verdict == "proved", r
        assert r.queries >= 19


@pytest.mark.parametrize("name", [n for n in every_n.EVERY_N if n not in every_n.SUMS])
def test_each_goal_is_a_conjunction_over_rows_and_pairs(name):
    """What makes reading it on x and on (x, y) the same as reading it on all N rows: checked on the bounded
    encoding's step of three requests, for every state and step."""
    pre = fresh(3, name != "priority-victim-is-least-important", BLOCK_SIZE)
    view = step_view(pre, step(pre))
    holds = BY_NAME[name].holds
    rows = view.rows
    parts = [holds(dataclasses.replace(view, rows=(r,))) for r in rows]
    parts += [holds(dataclasses.replace(view, rows=(a, b))) for i, a in enumerate(rows) for b in rows[i + 1 :]]
    assert _valid(holds(view) == z3.And(*parts), well_formed(pre))


def test_every_event_can_happen_under_the_loop_invariant():
    """The `reachable` obligations: without them a contradiction among the hypotheses would prove anything."""
    m = every_n.model(True, every_n.DEFAULT_RELEASE)
    reach = [(label, facts) for label, facts in every_n.obligations(m, "budget-conservation") if "reachable" in label]
    assert len(reach) == 5
    for label, facts in reach:
        s = z3.Solver()
        s.add(*[every_n_loop.as_bool(f) for f in facts])
        assert s.check() == z3.sat, label


def test_a_contradictory_loop_invariant_is_an_error_not_a_proof(monkeypatch):
    shape = every_n_loop.shape_facts
    monkeypatch.setattr(every_n_loop, "shape_facts", lambda c, g, x: [*shape(c, g, x), x.C < 0])
    r = every_n.prove_every_n("owed-nonnegative", True)
    assert r.verdict == "error" and "vacuous" in r.detail


@pytest.mark.parametrize("name", every_n.PER_REQUEST)
def test_each_per_request_fact_is_a_conjunction_over_rows(name):
    pre = fresh(2, True, BLOCK_SIZE)
    one = [Pre(pre.config, [s], z3.If(pre.running(i), 1, 0), pre.num_free_blocks) for i, s in enumerate(pre.slots)]
    holds = BY_NAME[name].holds
    claim = holds(state_view(pre)) == z3.And(*[holds(state_view(p)) for p in one])
    assert _valid(claim, well_formed(pre))


@pytest.mark.parametrize("name", every_n.SUMS)
@pytest.mark.parametrize("n", [2, 3])
def test_a_sum_read_on_one_row_beside_the_lumped_rest_is_the_sum_over_the_rows(name, n):
    pre = fresh(n, True, BLOCK_SIZE)
    view = step_view(pre, step(pre))
    holds = BY_NAME[name].holds
    per_row = []
    for i, row in enumerate(view.rows):
        others = [r for j, r in enumerate(view.rows) if j != i]
        rest_n = z3.Sum([r.num_scheduled for r in others])
        rest_b = z3.Sum([z3.If(r.post_live, r.post_num_blocks, 0) for r in others])
        lumped = dataclasses.replace(
            row, request_id="rest", scheduled=rest_n > 0, num_scheduled=rest_n, pre_live=True, post_live=True,
            post_num_blocks=rest_b,
        )  # fmt: skip
        per_row.append(holds(dataclasses.replace(view, rows=(row, lumped))))
    assert _valid(holds(view) == z3.And(*per_row), well_formed(pre))


def test_a_victim_appended_instead_of_prepended_breaks_no_starvation(monkeypatch):
    """The queue's keys are what no-starvation-after-prepend is proved from: put an FCFS victim at the back
    (vLLM's append-not-prepend bug) and the proof for every N no longer goes through."""
    pop = every_n.ev.pop

    def appended(c, g, x, tail=True):
        guard, g2, x2 = pop(c, g, x, tail)
        return guard, g2, dataclasses.replace(x2, key=z3.FreshReal("back"))

    monkeypatch.setattr(every_n.ev, "pop", appended)
    r = every_n.prove_every_n("no-starvation-after-prepend", True)
    assert r.verdict != "proved", r


def test_a_priority_victim_of_the_least_key_breaks_the_victim_rule(monkeypatch):
    """The PRIORITY pick, instantiated at the other request, is what the victim invariant is proved from."""
    from schedspec.proofs.encoding.order import key_gt
    from schedspec.spec.arith import implies

    monkeypatch.setattr(
        every_n_loop, "victim_instance", lambda c, x, y, tail: implies(y.in_run, key_gt(y.slot, x.slot))
    )
    assert every_n.prove_every_n("priority-victim-is-least-important", False).verdict != "proved"


def test_an_fcfs_victim_is_the_tail_unless_a_mutant_says_otherwise():
    assert every_n.fcfs_pops_tail()
    with applied(MUTANTS["wrong-victim"]):
        assert not every_n.fcfs_pops_tail()


def test_the_default_prove_run_ends_with_the_proofs_for_every_n(tmp_path, capsys):
    from schedspec.cli import main

    argv = ["prove", "--invariant", "no-admission-after-preemption", "--policy", "fcfs", "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "8 checks in" in out and "1 cells for every N" in out and "1 proved" in out


def test_every_n_names_the_invariants_it_has_proofs_for(capsys):
    from schedspec.cli import main

    assert main(["prove", "--every-n", "--invariant", "seqs-limit"]) == 2
    err = capsys.readouterr().err
    assert "seqs-limit" in err and "no-starvation-after-prepend" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "flag, value", [("--vllm-version", "9.9"), ("--mutant", "nope"), ("--timeout", "0"), ("--policy", "lifo")]
)
def test_every_n_refuses_bad_input_before_writing_anything(tmp_path, capsys, flag, value):
    from schedspec.cli import main

    out = tmp_path / "o"
    with pytest.raises(SystemExit) if flag == "--policy" else contextlib.nullcontext():
        assert main(["prove", "--every-n", flag, value, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert flag in err and value in err and "Traceback" not in err
    assert not out.exists()
