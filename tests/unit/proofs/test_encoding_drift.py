"""The Z3 encoding does not drift from the reference: evaluated on ints, it takes the reference's step.

Every state the reference reaches on generated workloads (at most 10 live
requests, to keep the O(N^3) evaluation on ints quick) is stepped by both,
with the fake model's sampled tokens, and compared through the encoding's
abstraction. Under each mutant of a shared rule the two must still agree:
that is what "a planted bug is written once" means. The encoding covers the
core scope here; sync spec decode and prefix caching, then async
scheduling (the engine loop's schedule-then-absorb step), are compared at the
end of the file.
"""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from schedspec.conformance.workloads.deployment import DEPLOYMENT_FAMILIES
from schedspec.conformance.workloads.families import FAMILIES, at_release, generate
from schedspec.conformance.workloads.mixed import MIXED_FAMILIES
from schedspec.conformance.workloads.release_examples import VERSION_WORKLOADS
from schedspec.conformance.workloads.strategies import workloads
from schedspec.mutants import MUTANTS, applied
from schedspec.proofs.drift.core import compare
from schedspec.reference_impl import ReferenceEngine
from schedspec.spec.engine import fake_model
from schedspec.spec.versions import RELEASES

MAX_LIVE = 10
CORE = [
    f for f in FAMILIES if f not in ("prefix-caching", "spec-decode", "async", *MIXED_FAMILIES, *DEPLOYMENT_FAMILIES)
]


def core_scope(config) -> bool:
    features = config.enable_prefix_caching or config.num_speculative_tokens or config.async_scheduling
    return not features and config.runner == "generate"  # pooling: a deployment feature, outside the encoding


def states(workload, max_steps=60):
    """Each state the reference starts a step from, with the tokens the fake model would sample."""
    assert core_scope(workload.config), workload.name
    engine = ReferenceEngine(workload.config)
    for step in range(min(workload.max_steps, max_steps)):
        for r in workload.arrivals_at(step):
            engine.add_request(r)
        for rid in workload.aborts_at(step):
            engine.abort_request(rid)
        state = engine.state()
        if 0 < len(state.requests) <= MAX_LIVE:
            yield state, {rid: workload.sampled_token(rid, r.num_output_tokens) for rid, r in state.requests.items()}
        output = engine.schedule()
        engine.update_from_output(output, fake_model(workload, output, engine.summary()))


def test_no_drift_on_thousands_of_reached_states():
    checked = 0
    for family in CORE:
        for index in range(25):
            for state, sampled in states(generate(family, 21, index)):
                assert compare(state, sampled) == [], (family, index, state.current_step)
                checked += 1
    assert checked > 2000


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.one_of([workloads(f) for f in CORE]), st.integers(0, 40))
def test_no_drift_hypothesis(workload, k):
    for state, sampled in states(workload, max_steps=k + 1):
        assert compare(state, sampled) == []


SHARED = [m for m in MUTANTS if m.target.startswith("spec.rules:")]


@pytest.mark.parametrize("mutant", SHARED, ids=[m.name for m in SHARED])
def test_a_mutant_of_a_rule_moves_the_encoding_with_the_reference(mutant):
    reached = [
        s
        for family in ("kv-pressure", "priority", "max-model-len", "stops", "threshold")
        for index in range(6)
        for s in states(generate(family, 22, index), max_steps=30)
    ]
    with applied(mutant):
        for state, sampled in reached:
            try:
                diffs = compare(state, sampled)
            except AssertionError:  # the mutated reference tripped one of vLLM's own asserts: nothing to compare
                continue
            assert diffs == [], (mutant.name, state.current_step, diffs[:3])


def test_the_two_cases_of_the_step_cover_it_exactly():
    """`step(pre, False)` (pops nobody) and `step(pre, True)` (pops somebody): on every reached state exactly
    one case's assumptions hold, and that case computes the full step. This is what lets `prove` split."""
    from dataclasses import replace

    from schedspec.proofs.drift.core import from_state
    from schedspec.proofs.encoding.step import step

    checked, seen = 0, set()
    for family in ("kv-pressure", "priority", "budget", "max-model-len", "aborts"):
        for index in range(8):
            for state, sampled in states(generate(family, 23, index)):
                pre, _ = from_state(state, sampled)
                full = step(pre)
                cases = [step(pre, preempts) for preempts in (False, True)]
                holds = [all(case.assume) for case in cases]
                assert holds.count(True) == 1, (family, index, state.current_step)
                assert replace(cases[holds.index(True)], assume=[]) == full
                checked += 1
                seen.add(holds.index(True))
    assert checked > 500 and seen == {0, 1}


# ---- Sync spec decode and prefix caching: the feature encoding against the reference's engine loop. ----


def feature_workloads(family, count, seed=21):
    """Synchronous workloads of a feature family. In the spec-decode family every other one gets one-token
    prompts: with prefix caching off that is the only way to a padded decode-like admission."""
    from dataclasses import replace

    for index in range(count):
        w = generate(family, seed, index)
        if family == "spec-decode" and index % 2:
            w = w.replace(
                config=replace(w.config, enable_prefix_caching=False),
                requests=tuple(
                    replace(r, request=replace(r.request, prompt_token_ids=r.request.prompt_token_ids[:1]))
                    if i % 2
                    else r
                    for i, r in enumerate(w.requests)
                ),
            )
        yield w


def test_no_drift_under_spec_decode_and_prefix_caching():
    from schedspec.proofs.drift.features import compare_features, shared_refs, spec_steps

    checked, seen = (
        0,
        dict(drafts=0, padded=0, padded_on_hit=0, rejected=0, trimmed=0, preempted=0, hits=0, shared=0, shared_freed=0),
    )
    for family in ("spec-decode", "prefix-caching"):
        for w in feature_workloads(family, 40):
            for step in spec_steps(w):
                pre, output, model_output, post, finished, proposals, probed = step
                assert compare_features(*step) == [], (w.name, pre.current_step)
                checked += 1
                new = {n.req_id: n.num_computed_tokens for n in output.scheduled_new_reqs}
                for rid, d in output.scheduled_spec_decode_tokens.items():
                    gen = model_output.sampled_token_ids.get(rid, ())
                    seen["drafts"] += 1
                    seen["padded"] += rid in new
                    seen["padded_on_hit"] += new.get(rid, 0) > 0
                    seen["rejected"] += len(gen) - 1 < len(d)
                    seen["trimmed"] += rid in finished and len(finished[rid].output_token_ids) < pre.requests[
                        rid
                    ].num_output_tokens + len(gen)
                seen["preempted"] += len(output.preempted_req_ids)
                seen["hits"] += sum(1 for c in new.values() if c > 0)
                seen["shared"] += shared_refs(post) > 0
                seen["shared_freed"] += sum(1 for p in probed.values() if p.get("shared_freed", 0) > 0)
    assert checked > 1000 and all(seen.values()), seen


FEATURE_SHARED = [
    m
    for m in MUTANTS
    if m.target.startswith("spec.rules:") and (not m.families or {"spec-decode", "prefix-caching"} & set(m.families))
]


@pytest.mark.parametrize("mutant", FEATURE_SHARED, ids=[m.name for m in FEATURE_SHARED])
def test_a_mutant_of_a_rule_moves_the_feature_encoding_with_the_reference(mutant):
    from schedspec.proofs.drift.features import compare_features, spec_steps

    with applied(mutant):
        for family in ("spec-decode", "prefix-caching"):
            for w in feature_workloads(family, 10, seed=22):
                try:
                    reached = list(spec_steps(w, max_steps=30))
                except AssertionError:  # the mutated reference tripped one of vLLM's own asserts: nothing to compare
                    continue
                for step in reached:
                    assert compare_features(*step) == [], (mutant.name, w.name, step[0].current_step)


# ---- Async scheduling: the engine loop's step, schedule then absorb the step in flight. ----


def test_no_drift_under_async_scheduling():
    from schedspec.proofs.drift.async_scheduling import async_steps, compare_async

    checked = 0
    seen = dict(
        absorbed=0,
        schedule_only=0,
        placeholders=0,
        skip_rule=0,
        rejected_in_flight=0,
        chunk_in_flight=0,
        stale=0,
        stale_stop=0,
        finished_with_new_step_in_flight=0,
        admitted=0,
        hits=0,
        drafts=0,
    )
    for index in range(65):  # 60 until the family's prompts fit their pools: three of them had idled 60 steps
        for step in async_steps(generate("async", 21, index)):
            assert compare_async(**step) == [], (index, step["pre"].current_step)
            checked += 1
            pre, (old, old_model), out, finished = step["pre"], step["in_flight"], step["output"], step["finished"]
            seen["absorbed" if old.num_scheduled_tokens else "schedule_only"] += 1
            for rid, r in pre.requests.items():
                seen["placeholders"] += r.num_output_placeholders > 0
                q = r.request
                seen["skip_rule"] += (
                    rid in pre.running
                    and rid not in out.num_scheduled_tokens
                    and r.num_output_placeholders > 0
                    and r.num_computed_tokens + 2 - r.num_output_placeholders >= q.num_prompt_tokens + q.max_tokens
                )
            for rid in old.num_scheduled_tokens:
                tokens, drafts = old_model.sampled_token_ids.get(rid, ()), old.scheduled_spec_decode_tokens.get(rid, ())
                seen["rejected_in_flight"] += 0 < len(tokens) <= len(drafts)
                seen["chunk_in_flight"] += not tokens and rid in pre.requests
                seen["stale"] += rid in out.preempted_req_ids
                seen["stale_stop"] += rid in out.preempted_req_ids and rid in finished
                seen["finished_with_new_step_in_flight"] += rid in finished and rid in out.num_scheduled_tokens
            seen["admitted"] += len(out.scheduled_new_reqs)
            seen["hits"] += sum(1 for n in out.scheduled_new_reqs if n.num_computed_tokens)
            seen["drafts"] += len(out.scheduled_spec_decode_tokens)
    assert checked > 800 and all(seen.values()), seen


ASYNC_SHARED = [m for m in MUTANTS if m.target.startswith("spec.rules:")]


@pytest.mark.parametrize("mutant", ASYNC_SHARED, ids=[m.name for m in ASYNC_SHARED])
def test_a_mutant_of_a_rule_moves_the_async_encoding_with_the_reference(mutant):
    from schedspec.proofs.drift.async_scheduling import async_steps, compare_async

    with applied(mutant):
        for index in range(10):
            try:
                reached = list(async_steps(generate("async", 22, index), max_steps=30))
            except AssertionError:  # the mutated reference tripped one of vLLM's own asserts: nothing to compare
                continue
            for step in reached:
                assert compare_async(**step) == [], (mutant.name, index, step["pre"].current_step)


def test_the_feature_drift_checks_see_an_encoding_that_drifts(monkeypatch):
    """Each feature drift check, shown to catch a bug planted in the encoding alone (a shared rule's mutant moves
    both sides, so it could not show this): one placeholder too many under async, one computed token too many
    after a sync spec-decode update."""
    from schedspec.proofs.drift.async_scheduling import async_steps, compare_async
    from schedspec.proofs.drift.features import compare_features, spec_steps
    from schedspec.proofs.encoding import update

    after_schedule, sample = update.after_schedule, update.sample
    monkeypatch.setattr(update, "after_schedule", lambda *a: {**after_schedule(*a), "P": after_schedule(*a)["P"] + 1})
    found = {
        f.split(".")[-1]
        for i in range(5)
        for s in async_steps(generate("async", 21, i))
        for f, _, _ in compare_async(**s)
    }
    assert "num_output_placeholders" in found
    monkeypatch.setattr(update, "sample", lambda *a: {**sample(*a), "C": sample(*a)["C"] + 1})
    found = {
        f.split(".")[-1]
        for w in feature_workloads("spec-decode", 5)
        for s in spec_steps(w)
        for f, _, _ in compare_features(*s)
    }
    assert "num_computed_tokens" in found


@pytest.mark.parametrize("release", RELEASES[:-1])
def test_no_drift_at_an_older_release(release):
    # One switch: the encoding reads the release from the config (proofs/encoding/state.Config.release), as the
    # reference does, on the core families and on the variant workloads of the core scope.
    checked = 0
    # The encoding's scope is the core scheduler: no feature, and no deployment feature (a grammar to wait for).
    core_variants = [
        make()
        for make in VERSION_WORKLOADS.values()
        if core_scope(make().config) and not any(r.grammar for r in make().requests) and not make().controls
    ]
    for w in [at_release(generate(f, 21, i), release) for f in CORE for i in range(4)] + core_variants:
        for state, sampled in states(at_release(w, release)):
            assert compare(state, sampled) == [], (w.name, release, state.current_step)
            checked += 1
    assert checked > 200


@pytest.mark.parametrize("release", RELEASES[:-1])
def test_no_feature_drift_at_an_older_release(release):
    # The feature encoding follows the release too: spec decode and prefix caching on their families and on
    # the variant workloads of their scope (the padded admissions, the min_tokens gate on appended drafts).
    from schedspec.proofs.drift.features import compare_features, spec_steps

    checked = 0
    # Calls outside schedule() (`spec.controls`) are outside the encoding's scope, as the deployment features are.
    variants = [
        make()
        for make in VERSION_WORKLOADS.values()
        if not make().config.async_scheduling and not make().controls and make().config.runner == "generate"
    ]
    family = [w for f in ("spec-decode", "prefix-caching") for w in feature_workloads(f, 8)]
    for w in [at_release(w, release) for w in family + variants]:
        for step in spec_steps(w):
            assert compare_features(*step) == [], (w.name, release, step[0].current_step)
            checked += 1
    assert checked > 200
