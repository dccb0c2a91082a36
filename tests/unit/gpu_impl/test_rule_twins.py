"""Each tensor twin of the torch engine computes what its rule computes, on seeded random inputs.

The torch engine may not import the reference, and the rules are written for
ints and Z3 terms, so it keeps tensor twins of them (`gpu_impl/rules.py`,
`gpu_impl/preemption.py`). A twin that drifts from its rule would show up in
the certificates only when a workload reaches the drifted case. Here every
twin meets its rule on thousands of random values, edge values included,
each case an element of one batched tensor call. A rule that takes a
`release` meets its twin at random releases ("+VARIANT" strings included),
the twin reading the release columns the engine keeps. The inputs are
seeded and their number bounded, so a failure reproduces.
"""

from __future__ import annotations

import random

import torch

from schedspec.gpu_impl import rules as twin
from schedspec.gpu_impl.load import priority_ranks
from schedspec.gpu_impl.preemption import fcfs_victim_index_twin, preempted_counters_twin, victim_key_twin
from schedspec.reference_impl import rules
from schedspec.reference_impl.live_request import LiveRequest
from schedspec.reference_impl.request_queue import PriorityRequestQueue
from schedspec.spec import rules as spec_rules
from schedspec.spec.request import Request, RequestStatus
from schedspec.spec.versions import RELEASES, VARIANTS, holds, problem

CASES = 4000  # elements per twin: one [CASES] tensor call each
ROWS, WIDTH = 300, 6  # victim orders: ROWS running lists of up to WIDTH requests


def ints(rng: random.Random, lo: int, hi: int, n: int = CASES) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


def releases(rng: random.Random, n: int = CASES) -> list[str]:
    """Random releases, some with "+VARIANT" rules taken early: what a config's `vllm_version` may say."""
    out = []
    for _ in range(n):
        base = rng.choice(RELEASES)
        early = [v.name for v in VARIANTS if problem(f"{base}+{v.name}") is None and rng.random() < 0.25]
        out.append("+".join([base, *early]))
    return out


def sides(variant: str, release: list[str]) -> torch.Tensor:
    """The release column the torch engine keeps for `variant` (`BatchState`): which side each release is on."""
    return torch.tensor([holds(variant, r) for r in release])


def t(xs) -> torch.Tensor:
    return torch.tensor(xs)


def test_victim_key_twin_takes_the_victims_in_the_rules_order():
    rng = random.Random(1)
    prio = [[rng.randint(0, 2) for _ in range(WIDTH)] for _ in range(ROWS)]
    arrival = [[float(rng.randint(0, 3)) for _ in range(WIDTH)] for _ in range(ROWS)]
    alive = [[rng.random() < 0.8 for _ in range(WIDTH)] for _ in range(ROWS)]
    got = victim_key_twin(t(prio), torch.tensor(arrival, dtype=torch.float64), t(alive)).tolist()
    for row in range(ROWS):
        running = [p for p in range(WIDTH) if alive[row][p]]
        expected = []
        while running:  # `max(running, key=victim_key)`, then the victim leaves `running`
            victim = max(running, key=lambda p: spec_rules.victim_key(prio[row][p], arrival[row][p]))
            running.remove(victim)
            expected.append(victim)
        assert got[row][: len(expected)] == expected, (prio[row], arrival[row], alive[row])


def test_fcfs_victim_index_twin_pops_from_the_tail():
    rng = random.Random(2)
    alive = [[rng.random() < 0.7 for _ in range(WIDTH)] for _ in range(ROWS)]
    got = fcfs_victim_index_twin(t(alive), torch.arange(WIDTH).expand(ROWS, WIDTH)).tolist()
    for row in range(ROWS):
        running = [p for p in range(WIDTH) if alive[row][p]]
        expected = [running.pop(rules.fcfs_victim_index(len(running))) for _ in range(len(running))]
        assert got[row][: len(expected)] == expected, alive[row]


def test_preempted_counters_twin_resets_what_the_rule_resets():
    rng = random.Random(3)
    victims = [rng.random() < 0.5 for _ in range(CASES)]
    status = [rng.choice([RequestStatus.WAITING, RequestStatus.RUNNING, RequestStatus.PREEMPTED]) for _ in range(CASES)]
    C, nspec, P, inflight, stale = (ints(rng, 0, 9) for _ in range(5))
    drop = [rng.random() < 0.5 for _ in range(CASES)]
    for dropping in (False, True):  # an in-step preemption, or a cache reset's (`drop`)
        out = [
            x.tolist()
            for x in preempted_counters_twin(
                t(victims), t([int(s) for s in status]), t(C), t(nspec), t(P), t(inflight), t(stale), t(drop), dropping
            )
        ]
        for i in range(CASES):
            after = spec_rules.preempted_counters(inflight[i], stale[i], drop[i], 0, dropping)
            # What the engine does not keep as tensors: the blocks go in `push_free`.
            assert after.num_blocks == 0
            expected = (
                (
                    int(after.status),
                    after.num_computed_tokens,
                    after.num_spec_tokens,
                    after.num_output_placeholders,
                    after.num_stale_output_tokens,
                    bool(after.drop_stale_output),
                )
                if victims[i]
                else (int(status[i]), C[i], nspec[i], P[i], stale[i], drop[i])
            )
            assert tuple(x[i] for x in out) == expected, i


def test_num_owed_tokens_twin():
    rng = random.Random(4)
    T, S, P, C = ints(rng, 1, 50), ints(rng, 0, 4), ints(rng, 0, 5), ints(rng, 0, 50)
    got = twin.num_owed_tokens(t(T) + t(S), t(P), t(C)).tolist()
    assert got == [spec_rules.num_owed_tokens(T[i] + S[i], P[i], C[i]) for i in range(CASES)]


def test_heap_key_ranks_are_the_reference_queues_pop_order():
    """The torch engine ranks with the rule itself (no twin); its ranks must be the reference queue's order."""
    rng = random.Random(5)
    for _ in range(100):
        reqs = [
            Request(
                f"r{rng.randint(0, 30)}-{i}", (1,), 1, priority=rng.randint(0, 2), arrival_time=float(rng.randint(0, 3))
            )
            for i in range(rng.randint(1, 8))
        ]
        ranks = priority_ranks(reqs)
        queue = PriorityRequestQueue(LiveRequest(q) for q in reqs)
        popped = [queue.pop_request().request_id for _ in reqs]
        assert [reqs[i].request_id for i in sorted(range(len(reqs)), key=ranks.__getitem__)] == popped


def test_effective_threshold_twin():
    rng = random.Random(6)
    thr, eligible, budget = ints(rng, 0, 20), ints(rng, 0, 6), ints(rng, 1, 64)
    adaptive = [rng.random() < 0.5 for _ in range(CASES)]
    rel = releases(rng)
    lone = sides("lone-request-threshold-off", rel)
    got = twin.effective_threshold(t(thr), t(eligible), t(adaptive), t(budget), lone).tolist()
    assert got == [rules.effective_threshold(thr[i], eligible[i], adaptive[i], budget[i], rel[i]) for i in range(CASES)]


def test_clamp_to_threshold_twin():
    rng = random.Random(7)
    n, thr = ints(rng, 0, 40), ints(rng, 0, 20)
    got = twin.clamp_to_threshold(t(n), t(thr)).tolist()
    assert got == [rules.clamp_to_threshold(n[i], thr[i]) for i in range(CASES)]


def test_grants_twin_is_the_running_pass_budget_clamp_in_queue_order():
    """The running pass's asks, granted by prefix sums, are what `running_num_new_tokens` grants one by one."""
    rng = random.Random(8)
    for _ in range(ROWS):
        L, thr, budget = rng.randint(2, 40), rng.randint(0, 8), rng.randint(1, 30)
        # Past L - 1 too: before 0.29.0 a min_tokens request gets there, and its grant is floored at 0.
        C = [rng.randint(0, L + 2) for _ in range(WIDTH)]
        owed = [rng.randint(0, 12) for _ in range(WIDTH)]
        ask = torch.minimum(twin.clamp_to_threshold(t(owed), t(thr)), L - t(C) - 1).clamp(min=0)
        got = twin.grants(ask[None, :], t([[budget]]))[0].tolist()
        left, expected = budget, []
        for i in range(WIDTH):  # the loop runs while budget is left; an n of 0 is skipped
            n = rules.running_num_new_tokens(owed[i], thr, left, L, C[i]) if left > 0 else 0
            expected.append(n)
            left -= n
        assert got == expected, (L, thr, budget, C, owed)


def test_blocks_for_twin_is_need_slot_then_blocks_to_allocate():
    rng = random.Random(9)
    L, bs = ints(rng, 1, 64), [rng.choice([1, 2, 4, 16]) for _ in range(CASES)]
    C = [rng.randint(0, L[i] + 2) for i in range(CASES)]  # past L too: the slot count still caps at L
    n, held = ints(rng, 0, 20), ints(rng, 0, 8)
    got = (twin.blocks_for(torch.minimum(t(C), t(L)) + t(n), t(L), t(bs)) - t(held)).clamp(min=0).tolist()
    assert got == [
        rules.num_blocks_to_allocate(rules.num_tokens_need_slot(C[i], n[i], 0, L[i]), held[i], bs[i])
        for i in range(CASES)
    ]


def test_max_prefix_hit_blocks_twin():
    rng = random.Random(10)
    T, bs = ints(rng, 1, 80), [rng.choice([1, 2, 4, 16]) for _ in range(CASES)]
    got = twin.max_prefix_hit_blocks(t(T), t(bs)).tolist()
    assert got == [rules.max_prefix_hit_blocks(T[i], bs[i]) for i in range(CASES)]


def test_pads_spec_decode_twin():
    rng = random.Random(11)
    k, n, C, L = ints(rng, 0, 3), ints(rng, 0, 3), ints(rng, 0, 10), ints(rng, 4, 14)
    prefill, running = ([rng.random() < 0.5 for _ in range(CASES)] for _ in range(2))
    rel = releases(rng)
    hit, room = sides("padding-after-prefix-hit", rel), sides("padding-needs-room-to-sample", rel)
    got = twin.pads_spec_decode(t(k), t(n), t(prefill), t(running), t(C), t(L), hit, room).tolist()
    assert got == [rules.pads_spec_decode(k[i], n[i], prefill[i], running[i], C[i], L[i], rel[i]) for i in range(CASES)]


def test_padded_admission_breaks_twin():
    rng = random.Random(15)
    pad = [rng.random() < 0.7 for _ in range(CASES)]
    k, budget, C, L = ints(rng, 0, 4), ints(rng, 0, 8), ints(rng, 0, 12), ints(rng, 2, 14)
    rel = releases(rng)
    room = sides("padding-needs-room-to-sample", rel)
    got = twin.padded_admission_breaks(t(pad), t(k), t(budget), t(C), t(L), room).tolist()
    assert got == [rules.padded_admission_breaks(pad[i], k[i], budget[i], C[i], L[i], rel[i]) for i in range(CASES)]


def test_self_preemption_continues_twin():
    rng = random.Random(16)
    policy = [rng.choice(["fcfs", "priority"]) for _ in range(CASES)]
    rel = releases(rng)
    goes_on = sides("priority-self-preemption-continues", rel)
    got = twin.self_preemption_continues(t([p == "priority" for p in policy]), goes_on).tolist()
    assert got == [rules.self_preemption_continues(policy[i], rel[i]) for i in range(CASES)]


def test_caches_on_update_twin():
    rng = random.Random(17)
    had = [rng.random() < 0.5 for _ in range(CASES)]
    k = ints(rng, 0, 3)
    rel = releases(rng)
    spec = sides("sync-spec-decode-caches-on-update", rel)
    got = twin.caches_on_update(t(had), t(k), spec).tolist()
    assert got == [bool(rules.caches_on_update(had[i], k[i], rel[i])) for i in range(CASES)]


def test_waits_for_grammar_twin():
    rng = random.Random(18)
    waits = [rng.random() < 0.5 for _ in range(CASES)]
    compiled = [rng.random() < 0.5 for _ in range(CASES)]
    got = twin.waits_for_grammar(t(waits), t(compiled)).tolist()
    assert got == [bool(rules.waits_for_grammar(waits[i], compiled[i])) for i in range(CASES)]


def test_lora_limit_skips_twin():
    rng = random.Random(19)
    lora, limit = ints(rng, 0, 4), [rng.choice([None, 1, 2, 3]) for _ in range(CASES)]
    held = [rng.random() < 0.5 for _ in range(CASES)]
    count = [rng.randint(0, m) if m else 0 for m in limit]
    got = twin.lora_limit_skips(t(lora), t(held), t(count), t([m or 0 for m in limit])).tolist()
    assert got == [bool(rules.lora_limit_skips(lora[i], held[i], count[i], limit[i])) for i in range(CASES)]


def test_decode_cadence_twins():
    rng = random.Random(20)
    step, eligible, stagger = ints(rng, 0, 9), ints(rng, 0, 9), ints(rng, 1, 4)
    got = twin.decode_cadence_waits(t(step), t(eligible)).tolist()
    assert got == [bool(rules.decode_cadence_waits(step[i], eligible[i])) for i in range(CASES)]
    got = twin.next_decode_eligible_step(t(step), t(stagger)).tolist()
    assert got == [rules.next_decode_eligible_step(step[i], stagger[i]) for i in range(CASES)]


def test_prefill_cadence_twins():
    rng = random.Random(21)
    flags = [[rng.random() < 0.5 for _ in range(CASES)] for _ in range(3)]
    local, since = ints(rng, 1, 4), ints(rng, -3, 5)
    got = twin.defers_prefills(t(flags[0]), t(flags[1]), t(flags[2]), t(local), t(since)).tolist()
    want = [
        bool(rules.defers_prefills(flags[0][i], flags[1][i], flags[2][i], local[i], since[i])) for i in range(CASES)
    ]
    assert got == want
    waiting, deferred, computed, tokens = ints(rng, 0, 5), ints(rng, 0, 5), ints(rng, 0, 9), ints(rng, 1, 9)
    got = twin.prefill_capacity_bound(t(waiting), t(deferred)).tolist()
    assert got == [bool(rules.prefill_capacity_bound(waiting[i], deferred[i])) for i in range(CASES)]
    got = twin.admits_a_prefill(t(computed), t(tokens)).tolist()
    assert got == [bool(rules.admits_a_prefill(computed[i], tokens[i])) for i in range(CASES)]


def test_num_scheduled_spec_tokens_twin_clamps_the_rule_at_zero():
    rng = random.Random(12)
    n, C, T, P = ints(rng, 1, 8), ints(rng, 0, 20), ints(rng, 1, 24), ints(rng, 0, 3)
    got = twin.num_scheduled_spec_tokens(t(n), t(C), t(T), t(P)).tolist()
    assert got == [max(rules.num_scheduled_spec_tokens(n[i], C[i], T[i], P[i]), 0) for i in range(CASES)]


def test_num_rejected_drafts_twin():
    rng = random.Random(13)
    d, g = ints(rng, 0, 4), ints(rng, 0, 5)
    got = twin.num_rejected_drafts(t(d), t(g)).tolist()
    assert got == [rules.num_rejected_drafts(d[i], g[i], 1) for i in range(CASES)]


def test_async_max_tokens_reached_twin():
    rng = random.Random(14)
    P, C, prompt, max_tokens = ints(rng, 0, 4), ints(rng, 0, 30), ints(rng, 1, 20), ints(rng, 1, 12)
    got = twin.async_max_tokens_reached(t(P), t(C), t(prompt), t(max_tokens)).tolist()
    assert got == [rules.async_max_tokens_reached(P[i], C[i], prompt[i], max_tokens[i]) for i in range(CASES)]


def test_prompt_hashes_twin_the_spec_s_block_hash_on_structured_prompts():
    """`prefix_cache.prompt_hashes` (a prefix sum per field) against `spec.block_hash.block_hashes` (a chain):
    every full block's hash and the running residues, on prompts of few tokens with zeros and repeats in them."""
    from schedspec.gpu_impl.prefix_cache import prompt_hashes
    from schedspec.spec.block_hash import BASES, MODULUS, TOKEN_OFFSET, block_hashes

    rng = random.Random(7)
    width, n = 8, 200
    for bs in (2, 4, 16):
        prompts = [[rng.choice((0, 0, 1, 5)) for _ in range(rng.randint(1, width * bs))] for _ in range(n)]
        prompts[0] = [0] * (width * bs)
        x = max(map(len, prompts))
        tokens = t([p + [0] * (x - len(p)) for p in prompts])
        hashes, h0, h1 = prompt_hashes(tokens, t([len(p) for p in prompts]), t([bs] * n), width)
        for i, p in enumerate(prompts):
            want = block_hashes(p, bs)
            assert hashes[i].tolist() == list(want) + [-1] * (width - len(want)), (bs, p)
            for h, base in zip((h0, h1), BASES, strict=True):
                r = 0
                for tok in p:
                    r = (r * base + tok + TOKEN_OFFSET) % MODULUS
                assert int(h[i]) == r


def test_pause_twins():
    rng = random.Random(22)
    pause, budget = ints(rng, 0, 2), ints(rng, 0, 64)
    rel = releases(rng)
    got = twin.paused_token_budget(t(pause), t(budget)).tolist()
    assert got == [rules.paused_token_budget(pause[i], budget[i]) for i in range(CASES)]
    got = twin.pause_admits_waiting(t(pause)).tolist()
    assert got == [bool(rules.pause_admits_waiting(pause[i])) for i in range(CASES)]
    column = t([holds("paused-new-runs-waiting-pass", r) for r in rel])
    got = twin.pause_runs_waiting_pass(t(pause), column).tolist()
    assert got == [bool(rules.pause_runs_waiting_pass(pause[i], rel[i])) for i in range(CASES)]


def test_pooling_twins():
    rng = random.Random(23)
    pooling, skip, caching = (ints(rng, 0, 1) for _ in range(3))
    rel = releases(rng)
    got = twin.sampled_tokens_per_step(t(pooling).bool(), sides("pooling-samples-no-token", rel)).tolist()
    assert got == [spec_rules.sampled_tokens_per_step(bool(pooling[i]), rel[i]) for i in range(CASES)]
    got = twin.prefix_cache_lookup_enabled(t(caching).bool(), t(skip).bool()).tolist()
    assert got == [bool(rules.prefix_cache_lookup_enabled(bool(caching[i]), bool(skip[i]))) for i in range(CASES)]
