"""Z3 in feature mode finds each feature mutant of a shared rule, with a counterexample the reference confirms.

The mutants are planted in the rules (`spec.rules`), so they reach the
reference and the feature encoding at once. For each, the invariants its
definition says it breaks (`Mutant.expect`, written with the mutant, not
read off Z3) are checked for N = 1, 2, 3 under both policies; the first
`violated` cell must come with a concrete state that, written to a file and
replayed by `schedspec replay`'s code with the mutant planted again, breaks
the invariant on the reference (or trips one of the reference's own
asserts, as Z7's full hit does: no token left to schedule). The feature
mutants whose bug lives in update.py or kv_cache_manager.py bookkeeping
(not a rule) are out of the encoding's reach by design: Z3 proves the
feature step despite them; the monitors, the state machine and the diff
catch them.
"""

import pytest

from schedspec.conformance.search.budget import DEFAULT_Z3_RLIMIT, z3_rlimit
from schedspec.mutants import BY_NAME
from schedspec.proofs.runs.features import SYNC, Job, run_job
from schedspec.proofs.runs.report import load_state_counterexample, replay_state, write_state_counterexample
from schedspec.spec.invariants import BY_NAME as INVARIANTS


@pytest.fixture(autouse=True)
def _counted():
    """Every query gets a fixed count of Z3 work units (`rlimit`), not seconds: the pins hold on a loaded machine.
    The 600 s job timeouts are only a safety cap; a query at either limit is `unknown`, which fails the pin."""
    with z3_rlimit(DEFAULT_Z3_RLIMIT):
        yield


SPEC_RULE_MUTANTS = ["spec-tokens-off-by-one", "padding-ignores-L", "Z7-full-hit-lookup"]
# Core-rule mutants still caught with drafts in the step: the stop verdict is applied at the first stop position.
CORE_RULE_MUTANTS = ["Z13-length-before-stop", "stop-at-L-off-by-one", "Z4-min-tokens-first"]
OUT_OF_REACH = ["no-rejection-rollback", "rejection-ignores-placeholder-guard", "Z7-recompute-one-token"]


# With async scheduling in the step (the engine loop's schedule-then-absorb): Z2 lives only there, and every
# rule mutant of the core and of the sync features is still caught with a step in flight.
ASYNC_RULE_MUTANTS = [
    "Z2-no-async-max-tokens-skip",
    "Z10-admit-after-preemption",
    "Z13-length-before-stop",
    "budget-off-by-one",
    "wrong-victim",
    "spec-tokens-off-by-one",
    "padding-ignores-L",
]
# _preempt_request and the skipped list are scheduler.py bookkeeping, not rules: the monitors and the diff catch them.
ASYNC_OUT_OF_REACH = ["placeholders-kept-on-preempt", "Z5-skipped-reversed"]
ALL = ("spec-decode", "prefix-caching", "async")


def first_violation(mutant: str, features=SYNC):
    for n in (1, 2, 3):
        for fcfs in (True, False):
            for name in BY_NAME[mutant].expect:
                r = run_job(Job(name, n, fcfs, 600, mutant, features))
                if r.verdict != "proved":
                    return r
    return None


@pytest.mark.parametrize("mutant", SPEC_RULE_MUTANTS + CORE_RULE_MUTANTS)
def test_feature_mode_finds_a_replayed_counterexample(mutant, tmp_path):
    assert BY_NAME[mutant].target.startswith("spec.rules:")
    r = first_violation(mutant)
    assert r is not None and r.verdict == "violated", r
    path = str(tmp_path / "cex.json")
    write_state_counterexample(path, r.invariant, r.n, r.policy, r.state, r.sampled, mutant)
    broken, _ = replay_state(load_state_counterexample(path))
    assert broken


def test_padding_needs_a_running_request_or_a_prefix_hit():
    # pads_spec_decode needs a running request scheduled or a prefix hit: alone, with caching off, it never pads.
    only_spec = ("spec-decode",)
    assert all(
        run_job(Job("chunk-bounds", 1, fcfs, 600, "padding-ignores-L", only_spec)).verdict == "proved"
        for fcfs in (True, False)
    )
    assert run_job(Job("chunk-bounds", 1, True, 600, "padding-ignores-L")).verdict == "violated"


@pytest.mark.parametrize("mutant", OUT_OF_REACH)
def test_update_bookkeeping_mutants_are_out_of_the_encodings_reach(mutant):
    assert BY_NAME[mutant].target.startswith(("reference_impl.update:", "reference_impl.kv_cache_manager:"))
    for name in BY_NAME[mutant].expect:
        assert run_job(Job(name, 2, True, 600, mutant)).verdict == "proved"


@pytest.mark.parametrize("mutant", ASYNC_RULE_MUTANTS)
def test_feature_mode_with_async_finds_a_replayed_counterexample(mutant, tmp_path):
    r = first_violation(mutant, ALL)
    assert r is not None and r.verdict == "violated", r
    path = str(tmp_path / "cex.json")
    write_state_counterexample(path, r.invariant, r.n, r.policy, r.state, r.sampled, mutant)
    broken, _ = replay_state(load_state_counterexample(path))
    assert broken
    if mutant == "Z2-no-async-max-tokens-skip":  # the smallest: one decode one step ahead of its last output
        assert (r.invariant, r.n) == ("no-decode-past-max-tokens", 1)
        assert r.state.requests["r00"].num_output_placeholders == 1


@pytest.mark.parametrize("mutant", ASYNC_OUT_OF_REACH)
def test_async_bookkeeping_mutants_are_out_of_the_encodings_reach(mutant):
    assert BY_NAME[mutant].target.startswith("reference_impl.scheduler:")
    for name in (n for n in BY_NAME[mutant].expect if n in INVARIANTS):  # the decision invariants are monitor-only
        assert run_job(Job(name, 2, True, 600, mutant, ("async",))).verdict == "proved"
