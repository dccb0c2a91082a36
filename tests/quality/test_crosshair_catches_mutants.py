"""CrossHair, run on the contracts, finds a confirmed counterexample for every core-scope mutant of the reference,
and for the feature mutants that a bounded search can reach.

Each mutant is pinned to the contract that catches it and to what the
concrete replay then shows: the invariant broken (and its step), or
"AssertionError" when one of vLLM's own end-of-step asserts, which the
reference keeps, fires first. The scenario count is how many of
CrossHair's paths ran before the first counterexample; with CrossHair's
fixed seed and these deterministic contracts it repeats exactly (measured
with crosshair-tool 0.0.113), so the test allows twice as many before it
calls the search a regression.

All mutants run at the start, two CrossHair processes at a time, each
within a count of CrossHair iterations (`iterations`: three times its
pinned scenarios, at least 100), every Z3 query bounded by work units
(`runner.SMT_RLIMIT`), so the verdict is the same on a loaded machine; the
CPU seconds (`CPU_BUDGET_S`) are only a safety cap. Z1 needs about 45 CPU-s,
the rest under 10, so Z1 runs only in the slow tier (`-m slow`).
The decision mutants (`DECISION_ONLY`) are left out, `priority-self-preempt-breaks`
among them: each changes a decision within every bound the catalogue
states, so it breaks no invariant a contract evaluates; only the monitors'
decision invariants (spec/invariants/decisions.py), which walk a trace's
turns against a rebuilt block pool and are not contracts, and the
differential checker see them (tests/quality/test_decision_invariants_catch_mutants.py).

The mutants of prefix caching, spec decode and async scheduling run against
`check_all_with_<feature>`, the contract whose scenarios have their feature
on (`FEATURE_PINNED`, 60 CPU-s each; each is found within 1 CPU-s).
Feature mutants not pinned, each with its reason:

* `Z5-skipped-reversed`: live only with a preempted request's output still in
  flight at the next schedule(), which the engine loop's batch queue of 2
  never allows; the state machine draws a queue of 3 and kills it.
* `hashed-freed-to-front`: it changes which free block is reused next, and
  so which prefixes stay cached, but breaks no invariant; the differential
  checker and the state machine's hash invariant catch it.
* `padding-ignores-L`: a padded admission past L needs L = 3, k = 2 and a
  decode scheduled beside a one-token prompt; 60 CPU-s of search (about 1,200
  scenarios) did not reach it. Z3 finds it at N = 2 (test_z3_catches_feature_mutants).
"""

from concurrent.futures import ThreadPoolExecutor

import pytest

from schedspec.mutants import MUTANTS
from schedspec.proofs.crosshair.contracts import FEATURE_OF
from schedspec.proofs.crosshair.runner import CX, run_contract

CPU_BUDGET_S = {"Z1-no-refund": 600.0}  # safety caps: the iteration count decides
DEFAULT_CPU_BUDGET_S = 300.0


def iterations(name: str) -> int:
    """CrossHair's iterations for a pinned mutant: room for three times the scenarios it needed, at least 100."""
    return max(100, 3 * ALL_PINNED[name][3])


# mutant: (contract, what the replay shows, step, scenarios CrossHair ran up to the first counterexample)
PINNED = {
    "Z1-no-refund": ("check_scheduled_subset_running", "AssertionError", None, 944),
    "Z4-min-tokens-first": ("check_token_bounds", "token-bounds", 3, 49),
    "Z10-admit-after-preemption": ("check_no_admission_after_preemption", "no-admission-after-preemption", 3, 90),
    "Z12-leak-on-preempt": ("check_block_conservation", "block-conservation", 2, 1),
    "Z13-length-before-stop": ("check_stop_token_finishes", "stop-token-finishes", 2, 2),
    "Z14-double-free": ("check_block_conservation", "block-conservation", 2, 1),
    "stop-at-L-off-by-one": ("check_token_bounds", "token-bounds", 2, 20),
    "threshold-off-by-one": ("check_chunk_bounds", "chunk-bounds", 4, 72),
    "budget-off-by-one": ("check_budget_conservation", "AssertionError", None, 129),
    "blocks-off-by-one": ("check_blocks_match_tokens", "blocks-match-tokens", 5, 5),
    "wrong-victim": ("check_fcfs_victim_is_latest", "fcfs-victim-is-latest", 2, 25),
    "append-not-prepend": ("check_no_starvation_after_prepend", "no-starvation-after-prepend", 3, 43),
    "missing-free": ("check_waiting_holds_nothing", "waiting-holds-nothing", 2, 1),
}

# The feature mutants, each on the feature contract of its feature.
FEATURE_PINNED = {
    "Z2-no-async-max-tokens-skip": ("check_all_with_async", "no-decode-past-max-tokens", 3, 1),
    "placeholders-kept-on-preempt": ("check_all_with_async", "waiting-holds-nothing", 6, 4),
    "Z6-touch-before-check": ("check_all_with_prefix_caching", "block-conservation", 5, 7),
    "Z7-full-hit-lookup": ("check_all_with_prefix_caching", "AssertionError", None, 7),
    "Z7-recompute-one-token": ("check_all_with_prefix_caching", "prefix-hit-below-last-token", 2, 11),
    "no-touch-on-hit": ("check_all_with_prefix_caching", "refcounts-match-tables", 3, 1),
    "no-evict-on-reuse": ("check_all_with_prefix_caching", "cached-blocks-match-tokens", 3, 1),
    "cache-wrong-hash": ("check_all_with_prefix_caching", "cached-blocks-match-tokens", 6, 7),
    "no-rejection-rollback": ("check_all_with_spec_decode", "computed-behind-known-tokens", 1, 3),
    "spec-tokens-off-by-one": ("check_all_with_spec_decode", "drafts-within-held", 2, 17),
    "rejection-ignores-placeholder-guard": ("check_all_with_spec_decode", "placeholder-counters", 1, 3),
}
FEATURE_NOT_PINNED = {"Z5-skipped-reversed", "hashed-freed-to-front", "padding-ignores-L"}
# Decisions changed within every bound: no contract of the catalogue can see them (see the docstring).
DECISION_ONLY = {
    "priority-self-preempt-breaks",
    "running-threshold-when-alone",
    "priority-victim-tie-last",
    "victim-index-not-adjusted",
    "watermark-ignored",
    "no-chunking-chunks",
    "free-not-reversed",
    "length-cap-one-early",
    "async-skip-breaks",
    "rollback-one-too-many",
    # Structured output: decision-only too, and no contract draws a grammar (docs/architecture.md's scope table).
    "grammar-not-awaited",
    "grammar-error-dropped",
    "lora-limit-ignored",  # LoRA: no contract draws an adapter either
    "decode-cadence-ignored",  # pipeline parallel: no contract draws a pipeline
    "prefill-cadence-ignored",  # the prefill cadence: no contract draws an interval
    "pause-admits-waiting",  # the engine's calls outside schedule(): no contract draws a pause
    "pooling-finishes-every-chunk",  # pooling: no contract draws a pooling model
}
ALL_PINNED = {**PINNED, **FEATURE_PINNED}


# Z1 alone needs about 45 CPU-s, half of this file's time: it runs in the slow tier (`-m slow`). The default
# suite still sees Z1 killed by the monitors, the differ and the state machine.
SLOW = {"Z1-no-refund"}


@pytest.fixture(scope="module")
def results(request):
    def one(name):
        cap = CPU_BUDGET_S.get(name, DEFAULT_CPU_BUDGET_S)
        return name, run_contract(ALL_PINNED[name][0], cap, name, max_iterations=iterations(name))

    selected = {
        item.callspec.params["name"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_crosshair_finds_a_confirmed_counterexample"
    }
    # The longest run first: it should not start last.
    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(one, sorted(selected, key=lambda n: n not in SLOW)))


def test_every_core_scope_mutant_is_pinned():
    # Every core-scope bug-zoo mutant and classic except the control that only the differential checker sees.
    # The mutants of prefix caching, spec decode and async (those with families) run on the feature contracts.
    assert set(PINNED) == {m.name for m in MUTANTS if not m.families} - DECISION_ONLY


def test_every_feature_mutant_is_pinned_or_argued():
    feature_mutants = {m.name: m for m in MUTANTS if m.families and m.name not in DECISION_ONLY}
    assert set(FEATURE_PINNED) | FEATURE_NOT_PINNED == set(feature_mutants)
    assert not set(FEATURE_PINNED) & FEATURE_NOT_PINNED
    for name, (contract, *_) in FEATURE_PINNED.items():  # each runs on scenarios with its own feature on
        assert FEATURE_OF[contract] in feature_mutants[name].families


@pytest.mark.slow_ok("the module's one CrossHair pool runs every pinned hunt; the first case pays for it")
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in ALL_PINNED])
def test_crosshair_finds_a_confirmed_counterexample(results, name):
    contract, what, step, scenarios = ALL_PINNED[name]
    r = results[name]
    assert r.verdict == CX, f"{name}: {r.verdict} after {r.scenarios} scenarios ({r.message})"
    assert (r.replay["what"], r.replay["step"]) == (what, step)
    assert r.scenarios <= max(10, 2 * scenarios), (
        f"{name}: the search needed {r.scenarios} scenarios, pinned {scenarios}"
    )
    print(f"{name}: {contract} after {r.scenarios} scenarios, {r.seconds:.1f} s wall, {r.cpu_seconds:.1f} CPU-s")
