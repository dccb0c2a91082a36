"""Each feature family (prefix caching, spec decode, async) exercises the feature it is named after, over a few dozen workloads.

A family that agreed with vLLM on 300 workloads proves little if none of
them evicted a cached block or rejected a draft. What the step records show
is counted by `conformance.campaign.behaviour_coverage` (the certificate's counters); what only
the scheduler's insides show (an eviction, a hit on an evictable block, the
async max-tokens skip rule) is counted by wrapping the reference's own
functions while it runs.
"""

from __future__ import annotations

from collections import Counter

import pytest

from schedspec.conformance.campaign.behaviour_coverage import behaviours_seen
from schedspec.conformance.workloads.families import generate
from schedspec.reference_impl import block_pool, rules, simulate
from schedspec.spec.request import RequestStatus

WORKLOADS = 40


def _campaign(family: str, monkeypatch) -> Counter[str]:
    seen: Counter[str] = Counter()
    evict, touch = block_pool.BlockPool._maybe_evict_cached_block, block_pool.BlockPool.touch
    skip = rules.async_max_tokens_reached

    def counting_evict(self, block):
        seen["eviction"] += block in self.block_hash
        return evict(self, block)

    def counting_touch(self, blocks):
        blocks = list(blocks)
        seen["hit_on_evictable_block"] += sum(self.ref_cnt.get(b, 0) == 0 for b in blocks)
        seen["hit_on_shared_block"] += sum(self.ref_cnt.get(b, 0) > 0 for b in blocks)
        return touch(self, blocks)

    def counting_skip(*args):
        fired = skip(*args)
        seen["async_skip_rule"] += bool(fired)
        return fired

    monkeypatch.setattr(block_pool.BlockPool, "_maybe_evict_cached_block", counting_evict)
    monkeypatch.setattr(block_pool.BlockPool, "touch", counting_touch)
    monkeypatch.setattr(rules, "async_max_tokens_reached", counting_skip)
    for i in range(WORKLOADS):
        w = generate(family, 0, i)
        trace = simulate(w)
        seen.update(behaviours_seen(w, trace.steps))
        seen["workloads_with_k"] += w.config.num_speculative_tokens > 0
        seen["workloads_with_caching"] += w.config.enable_prefix_caching
        for rec in trace.steps:
            for rid, f in rec.finished.items():
                drafts = rec.output.scheduled_spec_decode_tokens.get(rid, ())
                sampled = rec.model_output.sampled_token_ids.get(rid, ())
                # A stop token among accepted drafts: what was sampled after it is trimmed.
                if (
                    f.status == RequestStatus.FINISHED_STOPPED
                    and drafts
                    and len(sampled) > 1
                    and f.output_token_ids[-1] != sampled[-1]
                ):
                    seen["stop_inside_accepted_drafts"] += 1
    return seen


FEATURES = {
    "prefix-caching": [
        "prefix_hit",
        "prefix_self_hit",
        "eviction",
        "hit_on_evictable_block",
        "hit_on_shared_block",
        "preemption",
    ],
    "spec-decode": [
        "spec_rejection",
        "spec_padding",
        "spec_drafts_trimmed",
        "stop_inside_accepted_drafts",
        "prefix_hit",
        "preemption",
        "stop_max_model_len",
        "workloads_with_caching",
    ],
    "async": [
        "stale_output",
        "async_skip_rule",
        "preemption",
        "abort",
        "prefix_hit",
        "spec_rejection",
        "spec_padding",
        "workloads_with_k",
        "workloads_with_caching",
    ],
}


@pytest.mark.parametrize("family", list(FEATURES))
def test_family_hits_its_features(family, monkeypatch):
    seen = _campaign(family, monkeypatch)
    missing = [f for f in FEATURES[family] if seen[f] == 0]
    assert not missing, f"{family}: never exercised {missing} in {WORKLOADS} workloads ({dict(seen)})"


def test_families_off_their_feature_stay_off():
    """The older families keep the features off, so their certificates mean what they meant before."""
    for family in ("budget", "kv-pressure", "priority"):
        for i in range(10):
            c = generate(family, 0, i).config
            assert (c.enable_prefix_caching, c.num_speculative_tokens, c.async_scheduling) == (False, 0, False)
    assert all(generate("async", 0, i).config.async_scheduling for i in range(10))
    assert all(generate("prefix-caching", 0, i).config.enable_prefix_caching for i in range(10))
    assert all(generate("spec-decode", 0, i).config.num_speculative_tokens > 0 for i in range(10))


def test_the_prefix_caching_family_draws_the_token_patterns_of_vllm_s_tests():
    """Blocks of zeros, a block repeated right after itself, and two prompts that share whole blocks and then
    part inside the next: each in some of the family's first 40 workloads (vLLM's tests use all three)."""
    from schedspec.conformance.workloads.families import generate

    seen = {"zero block": 0, "repeated block": 0, "parting inside a block": 0}
    for i in range(40):
        w = generate("prefix-caching", 0, i)
        bs = w.config.block_size
        prompts = [r.request.prompt_token_ids for r in w.requests]
        blocks = [[p[k : k + bs] for k in range(0, len(p) - bs + 1, bs)] for p in prompts]
        seen["zero block"] += any(b == (0,) * bs for bb in blocks for b in bb)
        seen["repeated block"] += any(bb[k] == bb[k + 1] for bb in blocks for k in range(len(bb) - 1))
        for a in prompts:
            for b in prompts:
                common = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
                seen["parting inside a block"] += common is not None and common >= bs and common % bs != 0
    assert all(seen.values()), seen


@pytest.mark.parametrize("family", ["structured-output", "lora", "pipeline-parallel", "prefill-cadence"])
def test_a_deployment_family_draws_only_configs_the_spec_accepts(family):
    """Each episode overrides some of the mixed draw's knobs and inherits the rest: every combination must still be
    a config the spec accepts (a PRIORITY episode once inherited chunked prefill off under a budget below L)."""
    from schedspec.conformance.workloads.families import at_release
    from schedspec.spec.versions import RELEASES

    for seed in range(4):
        for index in range(64):
            w = generate(family, seed, index)  # the Workload's own checks run here
            at_release(w, RELEASES[0])
