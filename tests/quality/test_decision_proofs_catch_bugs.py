"""Z3 refutes each decision invariant's row form under a bug in the scheduler's copy of its rule.

The mutants of the decision invariants (`test_decision_invariants_catch_mutants.py`) change the
reference's own code, which the Z3 encoding does not import, and a mutant of a rule's home
(`spec.rules`) changes the row form along with the step. So each bug here is planted in the name
the reference and the encoding call (`reference_impl.rules`), not in the rule the row form reads:
the step departs from the rule, in both. Each pin says: this row form, this policy, refuted first
at this N, with this step, and the counterexample replays as `violated` on the planted reference.
Z3 work units (`rlimit`), not seconds, bound every query.
"""

from __future__ import annotations

import pytest

from schedspec.conformance.search.budget import DEFAULT_Z3_RLIMIT, z3_rlimit
from schedspec.proofs.runs.prove import check
from schedspec.reference_impl import rules as scheduler_rules
from schedspec.spec import rules
from schedspec.spec.invariants import DECISION_ROWS_BY_NAME


def threshold_when_alone(threshold, num_eligible_reqs, adaptive, input_budget, release):
    return threshold  # a lone request is capped too


def watermark_ignored(num_blocks_required, watermark_blocks, num_free_blocks):
    return num_blocks_required <= num_free_blocks


def self_preemption_breaks(policy, release):
    return False  # PRIORITY ends the pass at a self-preemption, as before 0.33.0


def length_cap_one_early(is_eos, is_stop_token, num_tokens, num_output_tokens, max_model_len, max_tokens, *rest):
    return rules.stop_kind(is_eos, is_stop_token, num_tokens, num_output_tokens + 1, max_model_len, max_tokens, *rest)


def head_is_the_victim(num_running):
    return 0


# rule: (planted, row form, policy, N first refuted, the replayed step's grants, its victims)
PINNED = {
    "effective_threshold": (threshold_when_alone, "grant-exact", "fcfs", 1, {"r00": 1}, []),
    "allocation_fits": (watermark_ignored, "admission-exact", "fcfs", 2, {"r00": 1, "r01": 1}, []),
    "self_preemption_continues": (self_preemption_breaks, "running-work-conserving", "priority", 2, {}, ["r01"]),
    "stop_kind": (length_cap_one_early, "stop-exact", "fcfs", 1, {"r00": 1}, []),
    "fcfs_victim_index": (head_is_the_victim, "victims-exact", "fcfs", 2, {}, ["r01"]),
}


@pytest.mark.parametrize("rule", PINNED)
def test_a_row_form_refutes_a_step_that_departs_from_its_rule(rule, monkeypatch):
    planted, name, policy, first_n, grants, victims = PINNED[rule]
    invariant = DECISION_ROWS_BY_NAME[name]
    with z3_rlimit(DEFAULT_Z3_RLIMIT):
        for n in range(1, first_n):  # the control: unplanted, every smaller N is proved
            assert check(invariant, n, policy == "fcfs", timeout_s=120).verdict == "proved"
        monkeypatch.setattr(scheduler_rules, rule, planted)
        verdicts = [check(invariant, n, policy == "fcfs", timeout_s=120) for n in range(1, first_n + 1)]
    assert [r.verdict for r in verdicts] == ["proved"] * (first_n - 1) + ["violated"], verdicts
    # Which of two symmetric requests Z3 names is its choice, not the bug's: the step is pinned up to renaming.
    cx = verdicts[-1].counterexample
    assert sorted(cx["num_scheduled_tokens"].values()) == sorted(grants.values())
    assert len(cx["preempted"]) == len(victims)
