"""The prover: small-N proofs, liveness findings, counterexample files and the CLI's exit codes."""

import json

import pytest

from schedspec.cli import main
from schedspec.proofs.runs import liveness
from schedspec.proofs.runs.prove import Job, check, run_job
from schedspec.proofs.runs.report import load_state_counterexample, replay_state, write_state_counterexample
from schedspec.spec.invariants import INVARIANTS
from schedspec.spec.versions import known_violation


@pytest.mark.parametrize("fcfs", [True, False], ids=["fcfs", "priority"])
def test_every_invariant_is_inductive_for_two_requests(fcfs):
    for n in (1, 2):
        for inv in INVARIANTS:
            assert check(inv, n, fcfs, timeout_s=60).verdict == "proved", (inv.name, n)


def test_the_d1_livelock_is_found_and_replayed():
    """A request whose full sequence needs more blocks than the pool has waits forever (D1)."""
    r = liveness.check("no-livelock", 1, True)
    assert r.verdict == "violated"
    need = r.counterexample["blocks_needed"]
    assert max(need.values()) > r.counterexample["usable_blocks"]
    assert r.counterexample["stuck_for_steps"] == liveness.REPLAY_STEPS


def test_head_of_line_blocking_starves_a_request_that_fits_alone():
    assert liveness.check("fits-alone-is-admitted", 1, True).verdict == "proved"
    r = liveness.check("fits-alone-is-admitted", 2, True)
    assert r.verdict == "violated"
    head = r.counterexample["waiting"][0]
    assert r.counterexample["blocks_needed"][head] > r.counterexample["usable_blocks"]


def test_state_counterexample_round_trips_and_replays(tmp_path):
    r = run_job(Job("no-admission-after-preemption", 1, True, 30, "Z10-admit-after-preemption"))
    assert r.verdict == "violated"
    path = tmp_path / "cx.json"
    write_state_counterexample(str(path), r.invariant, r.n, r.policy, r.state, r.sampled, "Z10-admit-after-preemption")
    data = load_state_counterexample(str(path))
    assert data["state"] == r.state
    broken, _ = replay_state(data)
    assert broken
    assert main(["replay", str(path)]) == 1
    pristine = json.loads(path.read_text())
    pristine["mutant"] = None
    path.write_text(json.dumps(pristine))
    assert main(["replay", str(path)]) == 0  # the same state is fine for the unmutated reference


def test_prove_cli(tmp_path, capsys):
    assert main(["prove", "--max-requests", "1", "--policy", "fcfs", "--out", str(tmp_path)]) == 0
    assert "0 violated" in capsys.readouterr().out
    assert main(["prove", "--invariant", "nope"]) == 2
    assert (
        main(
            [
                "prove",
                "--max-requests",
                "1",
                "--policy",
                "fcfs",
                "--mutant",
                "budget-off-by-one",
                "--invariant",
                "budget-conservation",
                "--out",
                str(tmp_path),
            ]
        )
        == 1
    )
    assert list(tmp_path.glob("proof-fcfs-budget-conservation-N1.json"))


@pytest.mark.parametrize("fcfs", [True, False], ids=["fcfs", "priority"])
def test_the_cut_proofs_go_through_without_falling_back(fcfs):
    """Induction over the running pass (proofs/runs/cuts.py): every lemma and every final query unsat, so the case that
    preempts is proved by the cut proof itself, not by the monolithic query it falls back to. That holds for the
    three invariants with a loop invariant of their own and, through the per-row one, for every other invariant."""
    import time

    from schedspec.proofs.runs.cuts import LOOP_INVARIANTS, ROWS, loop_invariant_of
    from schedspec.proofs.runs.prove import PRIORITY_ONLY, by_cuts, encoded_step

    pre, context, _ = encoded_step(4, fcfs, True, reuse=False)
    proofs: dict = {}
    for inv in INVARIANTS:
        if fcfs and inv.name in PRIORITY_ONLY:
            continue
        assert loop_invariant_of(inv.name) == (inv.name if inv.name in LOOP_INVARIANTS else ROWS)
        assert by_cuts(inv, pre, context, time.perf_counter() + 60, proofs), inv.name
    assert all(lemmas_hold for _, lemmas_hold in proofs.values())  # the row lemmas were solved once, and held


def test_a_failed_lemma_falls_back_to_a_replayed_counterexample():
    """Under budget-off-by-one the budget lemma fails, which proves nothing: the verdict comes from the monolithic
    query, a counterexample the mutated reference breaks when replayed."""
    import time

    from schedspec.mutants import BY_NAME as MUTANTS, applied
    from schedspec.proofs.runs.prove import by_cuts, encoded_step
    from schedspec.spec.invariants import BY_NAME

    with applied(MUTANTS["budget-off-by-one"]):
        pre, context, _ = encoded_step(2, False, True, reuse=False)
        assert not by_cuts(BY_NAME["budget-conservation"], pre, context, time.perf_counter() + 60)
    r = run_job(Job("budget-conservation", 2, False, 60, "budget-off-by-one"))
    assert r.verdict == "violated" and r.state is not None


@pytest.mark.parametrize("release", ["0.28.0", "0.32.0"])
def test_every_invariant_is_inductive_at_an_older_release(release):
    # The encoding takes the release's rules (proofs/encoding/state.Config.release). What an older release is
    # known to break (spec/versions.py: KNOWN_VIOLATIONS) is refuted, replayed, and reported as known.
    for inv in INVARIANTS:
        for fcfs in (True, False):
            r = check(inv, 2, fcfs, timeout_s=120, release=release)
            allowed = {"proved", "known"} if known_violation(inv.name, release) else {"proved"}
            assert r.verdict in allowed and r.release == release, (inv.name, r.verdict, r.counterexample)


def test_a_known_violation_is_found_at_its_release_and_proved_after_the_fix():
    # 0.28.0's check_stop lets min_tokens hold a request past L, which 0.29.0 fixed.
    from schedspec.spec.invariants import BY_NAME

    inv = BY_NAME["token-bounds"]
    old = check(inv, 1, True, timeout_s=120, release="0.28.0")
    assert old.verdict == "known" and "min_tokens" in old.counterexample["known"]
    assert check(inv, 1, True, timeout_s=120, release="0.29.0").verdict == "proved"


def test_prove_refuses_a_release_it_cannot_prove(tmp_path, capsys):
    assert main(["prove", "--vllm-version", "0.27.0", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("schedspec: error: --vllm-version: "), err
