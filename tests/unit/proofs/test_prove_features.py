"""Feature-mode proofs (sync spec decode, prefix caching): small-N proofs, non-vacuous facts, the CLI flag, the core run untouched."""

import pytest
import z3

from helpers import possible

from schedspec.cli import main
from schedspec.proofs.encoding.step import step
from schedspec.proofs.encoding.symbolic import fresh
from schedspec.proofs.runs.features import CONCRETE_ONLY, check, encoded_step
from schedspec.spec.invariants import BY_NAME, INVARIANTS
from schedspec.spec.versions import known_violation


@pytest.mark.parametrize("fcfs", [True, False], ids=["fcfs", "priority"])
def test_every_invariant_is_inductive_with_drafts_for_two_requests(fcfs):
    for n in (1, 2):
        for inv in INVARIANTS:
            verdict = check(inv, n, fcfs, timeout_s=60).verdict
            assert verdict == ("n/a" if inv.name in CONCRETE_ONLY else "proved"), (inv.name, n)


@pytest.mark.parametrize("release", ["0.28.0", "0.30.0"])
def test_every_invariant_is_inductive_with_drafts_at_an_older_release(release):
    # The feature encoding takes the release's rules too: 0.28.0's min_tokens gate, 0.30.0's padding after a hit.
    for inv in INVARIANTS:
        for fcfs in (True, False):
            r = check(inv, 2, fcfs, timeout_s=120, release=release)
            allowed = {"proved", "known"} if known_violation(inv.name, release) else {"proved"}
            if inv.name in CONCRETE_ONLY:
                allowed = {"n/a"}
            assert r.verdict in allowed and r.release == release, (inv.name, r.verdict, r.counterexample)


def test_a_stop_token_below_min_tokens_is_no_stop_before_0_29_under_spec_decode():
    # Found when the feature run first ran at 0.28.0: the spec-decode update called the stop token of a
    # request below min_tokens "sampled", so stop-token-finishes was refuted and the replay did not confirm it.
    assert check(BY_NAME["stop-token-finishes"], 1, True, timeout_s=120, release="0.28.0").verdict == "proved"


@pytest.mark.parametrize("preempts", [False, True])
def test_the_assumptions_leave_every_spec_behaviourpossible(preempts):
    """A proof is vacuous if WellFormed, Inv and the model's bounds rule out what spec decode does."""
    pre, context, post = encoded_step(2, True, preempts)
    facts = context + post.assume + post.inputs
    s0, s1 = pre.slots
    sampled_with_drafts = [post.num_scheduled_spec[0] > 0, post.num_scheduled[0] > 0]
    assert possible(facts + sampled_with_drafts)
    assert possible(facts + sampled_with_drafts + [s0.num_accepted < post.num_scheduled_spec[0]])  # a rejection
    assert possible(
        facts + sampled_with_drafts + [post.finished[0], post.num_tokens[0] < s0.num_tokens + 1 + s0.num_accepted]
    )  # trimmed
    if not preempts:
        assert possible(facts + [post.admitted[1], post.num_scheduled_spec[1] > 0])  # a padded admission
        assert possible(facts + [post.running[0], post.num_spec_tokens[0] > 0])  # a new proposal kept
        assert possible(facts + [post.admitted[1], post.num_hit_tokens[1] > 0])  # a prefix hit
        assert possible(facts + [post.admitted[1], s1.evictable < s1.hit_blocks])  # a hit on a held block: shared
        assert possible(facts + [post.finished[0], s0.shared_freed > 0])  # a finish that frees a shared block
    else:
        assert possible(facts + [post.preempted[0], s0.num_spec_tokens > 0])  # drafts dropped by preemption
        assert possible(facts + [post.preempted[0], s0.shared_freed > 0])  # a victim's shared block stays held


def _constants(terms) -> set[str]:
    seen, names, todo = set(), set(), [t for t in terms if z3.is_expr(t)]
    while todo:
        t = todo.pop()
        if t.get_id() in seen:
            continue
        seen.add(t.get_id())
        if z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            names.add(str(t))
        todo.extend(t.children())
    return names


def test_the_core_encoding_has_no_trace_of_the_feature():
    """The core run (`prove.py`) builds the formula it built before the feature: no draft symbol in it."""
    post = step(fresh(2, True, 4), True)
    names = _constants(
        post.num_computed_tokens + post.num_tokens + post.finished + post.run_pos + [post.num_free_blocks]
    )
    assert "prompt_0" in names and not any(
        n.startswith(
            (
                "spec_tokens",
                "accepted",
                "stop_at",
                "new_drafts",
                "is_prefill_chunk",
                "num_speculative",
                "hit_blocks",
                "evictable",
                "shared",
            )
        )
        for n in names
    )
    assert post.num_scheduled_spec == [] and post.inputs == [] and post.num_hit_tokens == []
    spec = step(fresh(2, True, 4, spec_decode=True), True)
    assert "accepted_0" in _constants(spec.num_tokens)  # the probe does see feature symbols where they are


def test_prove_cli_feature_flag(tmp_path, capsys):
    assert (
        main(
            [
                "prove",
                "--feature",
                "spec-decode",
                "--feature",
                "prefix-caching",
                "--max-requests",
                "1",
                "--policy",
                "priority",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "with spec-decode, prefix-caching" in out and "n/a" in out
    assert (
        main(
            [
                "prove",
                "--feature",
                "spec-decode",
                "--max-requests",
                "1",
                "--invariant",
                "chunk-bounds",
                "--mutant",
                "padding-ignores-L",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )  # needs two requests
    assert (
        main(
            [
                "prove",
                "--feature",
                "spec-decode",
                "--max-requests",
                "2",
                "--policy",
                "fcfs",
                "--invariant",
                "chunk-bounds",
                "--mutant",
                "padding-ignores-L",
                "--out",
                str(tmp_path),
            ]
        )
        == 1
    )
    assert list(tmp_path.glob("proof-fcfs-chunk-bounds-N2.json"))
    with pytest.raises(SystemExit):
        main(["prove", "--feature", "nope"])
