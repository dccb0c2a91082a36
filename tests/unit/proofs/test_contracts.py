"""The CrossHair contracts, concretely: golden inputs beside their expected reports, and one short CrossHair run.

The goldens are the raw arguments CrossHair itself printed for planted
bugs (tests/quality pins the search that finds them); here they are only
replayed, with no solver, so a change to the decoding, the runner's
parsing or a contract shows up in a second.
"""

import re

import pytest
from hypothesis import given, settings, strategies as st

from schedspec.cli import main
from schedspec.mutants import BY_NAME as MUTANTS, applied
from schedspec.proofs.crosshair import bounded, runner
from schedspec.proofs.crosshair.bounded import Ask, Draws, Knobs, decode, workload
from schedspec.proofs.crosshair.contracts import CONTRACTS, FEATURE_OF, HISTORY_CHECKS, contract, explain
from schedspec.proofs.crosshair.runner import CX, ERROR, NO_CX, UNCONFIRMED, UNKNOWN, classify, parse_args
from schedspec.spec.invariants import INVARIANTS

ZERO = (Knobs(*[0] * 11), Ask(*[0] * 6), Ask(*[0] * 6), Ask(*[0] * 6), 0)
DEFAULTS = (Knobs(*[-5] * 11), Ask(*[-5] * 6), Ask(*[-5] * 6), Ask(*[-5] * 6), -5)
LARGEST = (Knobs(*[99] * 11), Ask(*[99] * 6), Ask(*[99] * 6), Ask(*[99] * 6), 99)
# A feature contract's one more argument, for each of the three.
DRAWS = {
    id(ZERO): Draws(0, (0, 0, 0), (0, 0, 0)),
    id(DEFAULTS): Draws(-5, (-5, -5, -5), (-5, -5, -5)),
    id(LARGEST): Draws(99, (99, 99, 99), (99, 99, 99)),
}

# mutant: (contract, CrossHair's arguments, expected replay: what broke, at which step)
GOLDEN = {
    "Z1-no-refund": (
        "check_scheduled_subset_running",
        "Knobs(1, 5, 0, 3, 0, 6, 1, 0, 7, -1, 0), Ask(0, 3, 3, 0, 1, -1), "
        "Ask(0, 3, 2, 1, 0, -1), Ask(1, 0, 3, 0, 0, -1), 3",
        "AssertionError",
        None,
    ),
    "Z4-min-tokens-first": (
        "check_token_bounds",
        "Knobs(0, 8, 2, 3, 0, 6, 0, 1, 2, -1, 0), Ask(2, 7, 3, 3, 0, -1), "
        "Ask(2, 0, 3, 0, 0, 0), Ask(0, 0, 0, 0, 0, 0), 2",
        "token-bounds",
        3,
    ),
    "Z10-admit-after-preemption": (
        "check_no_admission_after_preemption",
        "Knobs(1, 4, 0, 3, 0, 4, 0, 0, 2, -1, 0), "
        "Ask(1, 0, 3, 0, 1, -1), Ask(2, 0, 3, 0, 0, -1), Ask(2, 2, 3, 0, 0, 2), 3",
        "no-admission-after-preemption",
        3,
    ),
    "Z12-leak-on-preempt": (
        "check_block_conservation",
        "Knobs(1, 8, 0, 3, 0, 4, 0, 0, 5, -1, 0), Ask(0, 5, 3, 1, 0, -1), "
        "Ask(1, 2, 3, 0, 0, 0), Ask(0, 0, 0, 0, 0, 0), 2",
        "block-conservation",
        2,
    ),
    "Z13-length-before-stop": (
        "check_stop_token_finishes",
        "Knobs(1, 8, 2, 3, 0, 5, 0, 1, 2, -1, 0), Ask(0, 5, 3, 0, 1, 2), "
        "Ask(2, 5, 2, 1, 0, -1), Ask(0, 2, 3, 0, 0, -1), 3",
        "stop-token-finishes",
        2,
    ),
    "Z14-double-free": (
        "check_block_conservation",
        "Knobs(1, 8, 0, 3, 0, 4, 0, 0, 5, -1, 0), Ask(0, 5, 3, 1, 0, -1), "
        "Ask(1, 2, 3, 0, 0, 0), Ask(0, 0, 0, 0, 0, 0), 2",
        "block-conservation",
        2,
    ),
    "wrong-victim": (
        "check_fcfs_victim_is_latest",
        "Knobs(0, 8, 0, 3, 0, 9, 0, 0, 7, 0, 0), Ask(1, 7, 3, 0, 0, -1), "
        "Ask(0, 2, 3, 0, 0, -1), Ask(0, 5, 3, 0, 0, 1), 3",
        "fcfs-victim-is-latest",
        2,
    ),
}


def test_every_check_has_a_contract():
    names = [i.name for i in INVARIANTS] + list(HISTORY_CHECKS)
    assert sorted(c for c in CONTRACTS.values() if c not in ("", "all")) == sorted(names)
    assert CONTRACTS["check_runs"] == "" and CONTRACTS["check_all"] == "all"
    for name in CONTRACTS:
        assert contract(name).__name__ == name and contract(name).__doc__.strip() == "post: __return__"


def test_history_checks_are_the_monitors_own():
    # The history contracts filter the monitor's violations by name: a renamed check would pass silently.
    import ast
    import inspect

    from schedspec.spec.invariants import monitor

    raised = {
        node.args[0].value
        for node in ast.walk(ast.parse(inspect.getsource(monitor)))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Violation"
        if node.args and isinstance(node.args[0], ast.Constant)
    }
    assert set(HISTORY_CHECKS) <= raised


def test_decoding_is_golden():
    config, reqs = decode(ZERO[0], ZERO[1:4], ZERO[4])
    assert (config.policy, config.max_model_len, config.block_size, config.num_gpu_blocks, config.token_budget) == (
        "fcfs",
        2,
        1,
        2,
        1,
    )
    assert reqs == (
        bounded.Req(prompt=1, max_tokens=1, min_tokens=0, priority=0, arrival_step=0, eos_at=0, abort_step=0),
    )
    config, reqs = decode(DEFAULTS[0], DEFAULTS[1:4], DEFAULTS[4])
    assert reqs == (bounded.Req(1, 1, 0, 0, 0, -1, -1),) and config.long_prefill_token_threshold == 0
    config, reqs = decode(LARGEST[0], LARGEST[1:4], LARGEST[4])
    assert (
        config.policy,
        config.max_model_len,
        config.block_size,
        config.num_gpu_blocks,
        config.token_budget,
        config.enable_chunked_prefill,
    ) == ("priority", 8, 4, 7, 12, False)
    assert [(r.prompt, r.max_tokens, r.arrival_step, r.eos_at) for r in reqs] == [
        (7, 3, 2, 2),
        (7, 3, 4, 2),
        (7, 3, 6, 2),
    ]
    assert [r.abort_step for r in reqs] == [-1, -1, 9]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(-20, 20), min_size=37, max_size=37),
    st.sampled_from([None, "prefix-caching", "spec-decode", "async"]),
)
def test_every_input_decodes_to_a_well_formed_scenario(raw, feature):
    k, asks, n = Knobs(*raw[:11]), tuple(Ask(*raw[11 + 6 * i : 17 + 6 * i]) for i in range(3)), raw[29]
    draws = Draws(raw[30], tuple(raw[31:34]), tuple(raw[34:37]))
    config, reqs = decode(k, asks, n, feature, draws)  # SchedulerConfig validates as vLLM does
    w = workload(config, reqs)  # and the workload as a user's file is validated
    L = config.max_model_len
    assert 2 <= L <= bounded.MAX_MODEL_LEN and 2 <= config.num_gpu_blocks <= bounded.MAX_GPU_BLOCKS
    assert 1 <= len(reqs) <= bounded.MAX_REQUESTS and sum(a.step >= 0 for a in w.aborts) <= 1
    for a, b in zip(reqs, reqs[1:]):
        assert a.arrival_step <= b.arrival_step
    for r in reqs:
        assert 1 <= r.prompt < L and 0 <= r.min_tokens <= r.max_tokens <= bounded.MAX_TOKENS and r.eos_at < r.max_tokens


@pytest.mark.parametrize("args", [ZERO, DEFAULTS, LARGEST], ids=["zero", "defaults", "largest"])
def test_every_contract_holds_on_the_reference(args):
    for name in CONTRACTS:
        full = args + (DRAWS[id(args)],) if name in FEATURE_OF else args
        assert contract(name)(*full), name
        assert explain(name, *full).holds


# The feature contracts' goldens (prefix caching, spec decode, async scheduling): CrossHair's arguments,
# a Draws among them, beside the replay.
FEATURE_GOLDEN = {
    "Z2-no-async-max-tokens-skip": (
        "check_all_with_async",
        "Knobs(1, 8, 2, 3, 0, 8, 1, 0, 3, -1, 0), "
        "Ask(0, 5, 2, 0, 0, 0), Ask(2, 0, 0, 0, 0, 0), Ask(0, 0, 3, 2, 0, -1), 3, "
        "Draws(1, (1, 1, 1), (0, 0, 1))",
        "no-decode-past-max-tokens",
        3,
    ),
    "no-evict-on-reuse": (
        "check_all_with_prefix_caching",
        "Knobs(1, 8, 2, 3, 0, 8, 1, 1, 3, -1, 0), "
        "Ask(0, 2, 3, 0, 1, -1), Ask(0, 5, 3, 1, 0, 2), Ask(0, 5, 3, 0, 0, -1), 3, "
        "Draws(0, (0, 0, 0), (0, 0, 0))",
        "cached-blocks-match-tokens",
        3,
    ),
    "no-rejection-rollback": (
        "check_all_with_spec_decode",
        "Knobs(1, 7, 2, 3, 0, 9, 0, 0, 5, -1, 0), "
        "Ask(0, 2, 3, 0, 0, -1), Ask(1, 0, 3, 0, 0, -1), Ask(2, 4, 3, 0, 1, 0), 3, "
        "Draws(2, (2, 2, 2), (0, 0, 2))",
        "computed-behind-known-tokens",
        1,
    ),
}


@pytest.mark.parametrize("mutant", list(FEATURE_GOLDEN))
def test_feature_golden_counterexample_replays(mutant):
    name, text, what, step = FEATURE_GOLDEN[mutant]
    args = parse_args(text)
    assert isinstance(args[-1], Draws)
    assert explain(name, *args).holds
    with applied(MUTANTS[mutant]):
        replay = explain(name, *args)
    assert (replay.holds, replay.what, replay.step) == (False, what, step)
    config = replay.workload["config"]  # the feature is on in the scenario the replay shows
    assert {
        "check_all_with_async": config.get("async_scheduling"),
        "check_all_with_prefix_caching": config.get("enable_prefix_caching"),
        "check_all_with_spec_decode": config.get("num_speculative_tokens", 0) > 0,
    }[name]


def test_feature_scenarios_decode_well_formed_and_the_core_ones_do_not_change():
    """A feature contract turns on its feature and nothing else; without `feature`, `decode` ignores the draws."""
    k, asks, n = LARGEST[0], LARGEST[1:4], LARGEST[4]
    d = Draws(99, (99, 99, 99), (99, 99, 99))
    assert decode(k, asks, n, None, d) == decode(k, asks, n)
    for feature in ("prefix-caching", "spec-decode", "async"):
        config, reqs = decode(k, asks, n, feature, d)
        workload(config, reqs)  # validated as a user's file
        assert (config.enable_prefix_caching, config.num_speculative_tokens > 0, config.async_scheduling) == (
            feature == "prefix-caching",
            feature in ("spec-decode", "async"),
            feature == "async",
        )
        assert all(r.drafts == (config.num_speculative_tokens if feature != "prefix-caching" else 0) for r in reqs)


@pytest.mark.parametrize("mutant", list(GOLDEN))
def test_golden_counterexample_replays(mutant):
    name, text, what, step = GOLDEN[mutant]
    args = parse_args(text)
    assert explain(name, *args).holds  # the scenario is fine on the reference itself
    with applied(MUTANTS[mutant]):
        replay = explain(name, *args)
    assert (replay.holds, replay.what, replay.step) == (False, what, step)
    with applied(MUTANTS[mutant]):
        assert not explain("check_all", *args).holds  # the combined contract sees it too
    if what == "AssertionError":  # the assert inside the mutant's recompiled copy, mapped back to the file
        assert re.match(r"scheduler\.py:\d+: assert len\(scheduled_new_reqs\)", replay.detail), replay.detail
    assert replay.workload["name"] == "crosshair-scenario"


def test_crosshair_messages_are_classified():
    err = (
        "/x/contracts.py:76: error: false when calling check_seqs_limit(Knobs(1, 2, 0, 0, 0, 0, 0, 0, 0, -1, 0), "
        "Ask(0, 0, 0, 0, 0, 0), Ask(0, 0, 0, 0, 0, 0), Ask(0, 0, 0, 0, 0, 0), 1) (which returns False)"
    )
    verdict, _, args = classify([err], "check_seqs_limit")
    assert verdict == CX and parse_args(args)[4] == 1
    exc = "/x/contracts.py:76: error: AssertionError:  when calling check_runs(Knobs(1, 2, 0, 0, 0, 0, 0, 0, 0, -1, 0), Ask(0, 0, 0, 0, 0, 0), Ask(0, 0, 0, 0, 0, 0), Ask(0, 0, 0, 0, 0, 0), 2)"
    assert classify([exc], "check_runs")[0] == CX
    assert classify(["/x/contracts.py:76: info: Confirmed over all paths."], "check_runs")[0] == NO_CX
    assert classify(["/x/contracts.py:76: info: Not confirmed."], "check_runs")[0] == UNKNOWN
    assert classify([], "check_runs")[0] == UNKNOWN  # nothing said is never a proof


def test_arguments_are_parsed_not_evaluated():
    with pytest.raises((ValueError, KeyError)):
        parse_args("__import__('os').getcwd(), 1")
    with pytest.raises(ValueError):
        parse_args("Knobs('a'), 1")


def test_a_counterexample_that_does_not_replay_is_unconfirmed():
    # CrossHair's word alone is not enough: the Z14 scenario on the pristine reference holds, so it stays unconfirmed.
    name, text, _, _ = GOLDEN["Z14-double-free"]
    line = f"/x/contracts.py:76: error: false when calling {name}({text}) (which returns False)"
    got = {"rc": 1, "seconds": 0.1, "cpu_seconds": 0.1, "lines": [line], "scenarios": 1}
    task = runner.Task(name, 1, None)
    r = runner.outcome(task, {**got, "replay": runner.replay_counterexample(name, text, None)})
    assert r.verdict == UNCONFIRMED and r.replay["holds"]
    r = runner.outcome(task, {**got, "replay": "ValueError: unexpected call"})  # a replay that failed confirms nothing
    assert r.verdict == UNCONFIRMED and "replay failed" in r.message
    r = runner.outcome(task, runner.Failure("worker exited with status -11"))  # no answer at all: never a pass
    assert r.verdict == ERROR and r.scenarios == 0


def test_a_short_crosshair_run_finds_nothing_on_the_reference():
    r = runner.run_contract("check_one_place", timeout=2)
    assert r.verdict == UNKNOWN and r.scenarios > 0  # time ran out: never reported as proved


def test_cli_refuses_bad_input(capsys):
    assert main(["contracts", "--contract", "no-such-check"]) == 2
    assert main(["contracts", "--timeout", "0"]) == 2
    assert main(["contracts", "--mutant", "Z99"]) == 2
    err = capsys.readouterr().err
    assert all(re.match(r"schedspec: error: --(contract|timeout|mutant): ", line) for line in err.strip().splitlines())


def test_cli_reports_a_confirmed_counterexample(tmp_path, capsys):
    rc = main(
        [
            "contracts",
            "--contract",
            "block-conservation",
            "--mutant",
            "Z14-double-free",
            "--timeout",
            "20",
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 1 and "counterexample" in out and "block-conservation" in out
    assert (tmp_path / "results.json").exists() and (tmp_path / "check_block_conservation.workload.json").exists()
    assert main(["contracts", "--contract", "block-conservation", "--out", str(tmp_path)]) == 2  # no --force
