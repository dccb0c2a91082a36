"""Async scheduling in the Z3 feature run: the proofs, their assumptions left non-vacuous, and the CLI flag.

The async step is the engine loop's (schedule, then absorb the older step in
flight), with a per-request record of that step which the pre-state assumes
and every check proves again of the post-state (`proofs/encoding/async_scheduling.py`).
A proof over assumptions that rule out what async scheduling does would be
vacuous, so each behaviour below must be satisfiable together with every
assumption of the feature run.
"""

import pytest
import z3

from helpers import possible

from schedspec.cli import main
from schedspec.proofs.runs.features import CONCRETE_ONLY, check, encoded_step
from schedspec.spec.invariants import INVARIANTS

ASYNC = ("async",)
ALL = ("spec-decode", "prefix-caching", "async")


@pytest.mark.parametrize("features", [ASYNC], ids=["async"])
@pytest.mark.parametrize("fcfs", [True, False], ids=["fcfs", "priority"])
def test_every_invariant_is_inductive_under_async_for_two_requests(features, fcfs):
    for n in (1, 2):
        for inv in INVARIANTS:
            verdict = check(inv, n, fcfs, timeout_s=60, features=features).verdict
            assert verdict == ("n/a" if inv.name in CONCRETE_ONLY else "proved"), (inv.name, n, features)


# All three features at N = 2 were the slowest proofs of the unit tier (about 4.5 s an ordering); they run in
# tests/slow/test_prove_long.py. The default suite still proves the three together at N = 1, and each half at
# N = 2: async alone above, spec decode with prefix caching in test_prove_features.py.
@pytest.mark.parametrize("fcfs", [True, False], ids=["fcfs", "priority"])
def test_every_invariant_is_inductive_with_all_three_features_for_one_request(fcfs):
    for inv in INVARIANTS:
        verdict = check(inv, 1, fcfs, timeout_s=60, features=ALL).verdict
        assert verdict == ("n/a" if inv.name in CONCRETE_ONLY else "proved"), inv.name


@pytest.mark.parametrize("preempts", [False, True])
def test_the_assumptions_leave_every_async_behaviourpossible(preempts):
    pre, context, post = encoded_step(2, True, preempts, ALL)
    facts = context + post.assume + post.inputs
    s0, s1 = pre.slots
    if not preempts:
        # a decode scheduled behind the step in flight: placeholders before and after
        assert possible(
            facts + [s0.num_output_placeholders > 0, post.scheduled[0], post.num_output_placeholders[0] > 0]
        )
        # drafts rejected in the step absorbed
        assert possible(facts + [s0.in_flight, s0.in_flight_num_drafts > 0, s0.num_accepted < s0.in_flight_num_drafts])
        # the step in flight was a prefill chunk, and the request goes on with its next chunk or its decode
        assert possible(facts + [s0.in_flight, s0.in_flight_placeholders == 0, post.scheduled[0]])
        # the skip rule: a running request owed tokens is not scheduled although budget remains
        assert possible(
            facts
            + [
                pre.num_running == 1,
                s0.num_output_placeholders > 0,
                z3.Not(post.scheduled[0]),
                post.num_scheduled[1] > 0,
            ]
        )
        # a request finishes in the step absorbed although the new step scheduled it again
        assert possible(facts + [post.scheduled[0], post.finished[0]])
        assert possible(facts + [post.admitted[1], post.num_hit_tokens[1] > 0])  # an admission with a prefix hit
    else:
        # a victim with its step in flight: stale output, appended to the waiting request, which may stop there
        assert possible(facts + [post.preempted[0], s0.in_flight, s0.in_flight_placeholders > 0, post.waiting[0]])
        assert possible(facts + [post.preempted[0], s0.in_flight, post.finished[0]])


def test_the_catalogue_alone_is_not_inductive_under_async():
    """Why the record is assumed (and proved again after every step): without it, a pre-state may hold
    placeholders that no step in flight accounts for, and the catalogue's async invariant does not carry over."""
    from schedspec.proofs.encoding.symbolic import in_flight_record
    from schedspec.proofs.runs.prove import goal_of
    from schedspec.spec.invariants import BY_NAME

    pre, context, post = encoded_step(1, True, False, ASYNC)
    record = in_flight_record(pre, 0)
    weaker = [c for c in context if not (z3.is_expr(c) and c.eq(record))]
    assert len(weaker) == len(context) - 1
    goal = goal_of(BY_NAME["placeholders-match-in-flight"], pre, post)
    assert possible(weaker + post.assume + post.inputs + [z3.Not(goal)])
    assert not possible(context + post.assume + post.inputs + [z3.Not(goal)])


def test_prove_cli_async_flag(tmp_path, capsys):
    assert main(["prove", "--feature", "async", "--max-requests", "1", "--out", str(tmp_path)]) == 0
    assert "with async" in capsys.readouterr().out
    assert (
        main(
            [
                "prove",
                "--feature",
                "async",
                "--max-requests",
                "1",
                "--policy",
                "fcfs",
                "--invariant",
                "no-decode-past-max-tokens",
                "--mutant",
                "Z2-no-async-max-tokens-skip",
                "--out",
                str(tmp_path),
            ]
        )
        == 1
    )
    assert main(["replay", str(tmp_path / "proof-fcfs-no-decode-past-max-tokens-N1.json")]) == 1


@pytest.mark.parametrize(
    "sampled, field",
    [
        ({"r00": 7}, "sampled_token.r00.tokens"),  # a sync entry for an async state
        ({}, "sampled_token.r00.tokens"),  # a request with no entry
        ({"r00": {"tokens": [7], "in_flight": [1]}}, "sampled_token.r00.in_flight"),
        ([7], "sampled_token"),
    ],
)
def test_a_malformed_counterexample_is_a_one_line_error(tmp_path, capsys, sampled, field):
    import json

    assert (
        main(
            [
                "prove",
                "--feature",
                "async",
                "--max-requests",
                "1",
                "--policy",
                "fcfs",
                "--invariant",
                "no-decode-past-max-tokens",
                "--mutant",
                "Z2-no-async-max-tokens-skip",
                "--out",
                str(tmp_path),
            ]
        )
        == 1
    )
    path = tmp_path / "proof-fcfs-no-decode-past-max-tokens-N1.json"
    data = json.loads(path.read_text())
    data["sampled_token"] = sampled
    path.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"counterexample.{field}:" in err, err
