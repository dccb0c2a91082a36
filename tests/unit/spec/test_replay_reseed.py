"""A replay that skipped records and was reseeded judges the next step exactly as the full replay does.

A sampled live monitor (`live/online.py`, `sample=N`) does not replay the
steps it does not judge: it `skip`s them, and before each judged step it
`reseed`s the block tables, drafts, `is_prefill_chunk` flags and pool from
the engine's state. Here the engine's state is the full replay's own, frozen
as each record closes, so a reseeded replay must give the same view, decision
problems included, at every step of every family. The hashes the seed hands
over are the spec's, as the full replay computed them; the live monitor
hands over vLLM's (`live/vllm_seed.py`), which the vLLM-side test checks.
"""

import dataclasses

import pytest

from schedspec.conformance.workloads.families import generate
from schedspec.reference_impl import ReferenceEngine
from schedspec.spec import engine as engine_loop
from schedspec.spec.invariants.replay import ReplaySeed, TraceReplay
from schedspec.spec.invariants.step_walk import BLOCK_CHOICE
from schedspec.spec.trace import Trace

FAMILIES = [
    "prefix-caching",
    "spec-decode",
    "async",
    "kv-pressure",
    "priority",
    "aborts",
    "pipeline-parallel",
    "prefill-cadence",
]


def _records(workload):
    return list(engine_loop.steps(ReferenceEngine(workload.config), workload))


def _longest_hashes(workload, records):
    """Each request's longest list of block hashes the full replay computed: what an engine's request holds."""
    replay, longest = TraceReplay(Trace(workload, tuple(records))), {}
    spec_hashes = replay.shadow.hashes

    def recording(rid):
        hashes = spec_hashes(rid)
        if len(hashes) > len(longest.get(rid, ())):
            longest[rid] = hashes
        return hashes

    replay.shadow.hashes = recording
    for rec in records:
        replay.step(rec)
    return longest


def _seed_of(replay: TraceReplay, longest) -> ReplaySeed:
    sh = replay.shadow
    return ReplaySeed(
        blocks=dict(replay.blocks),
        drafts=dict(replay.spec),
        prefill_chunk=dict(replay.prefill_chunk),
        free_queue=tuple(sh.queue),
        cached={h: tuple(b) for h, b in sh.cached.items()},
        num_cached=dict(sh.num_cached),
        hash_source=lambda rid: longest.get(rid, ()),
        decode_eligible=dict(replay.cadence.eligible),
        prefill_capacity_bound=replay.prefill.capacity_bound,
        deferred_waiting=frozenset(replay.prefill.deferred),
        num_executed_steps=replay.prefill.num_executed_steps,
        last_prefill_step=replay.prefill.last_prefill_step,
    )


def _reseeded_views(workload, perturb=None):
    """(full view, reseeded view) of every step after the first, each reseeded replay having skipped all before."""
    records = _records(workload)
    longest = _longest_hashes(workload, records)
    trace = Trace(workload, tuple(records))
    full = TraceReplay(trace)
    full.step(records[0])
    for k in range(1, len(records)):
        seed = _seed_of(full, longest)
        if perturb is not None:
            seed = perturb(seed)
        sampled = TraceReplay(trace)
        for rec in records[:k]:
            sampled.skip(rec)
        sampled.reseed(seed)
        yield records[k], full.step(records[k]), sampled.step(records[k])


@pytest.mark.parametrize("family", FAMILIES)
def test_a_reseeded_replay_judges_every_step_as_the_full_replay(family):
    steps = judged_problems = 0
    for index in range(6):
        for rec, full, sampled in _reseeded_views(generate(family, 0, index)):
            assert sampled == full, (family, index, rec.step)
            steps += 1
            judged_problems += bool(full.decision_problems)
    assert steps > 30
    assert judged_problems == 0  # the reference's traces: every decision right in both


def test_a_skipped_replay_must_be_reseeded_before_it_judges():
    w = generate("prefix-caching", 0, 0)
    records = _records(w)
    replay = TraceReplay(Trace(w, tuple(records)))
    replay.skip(records[0])
    with pytest.raises(RuntimeError, match="skipped a record"):
        replay.step(records[1])


def test_a_seed_with_the_wrong_free_queue_is_caught_at_the_next_allocation():
    """The seed is what a reseeded step is judged from: a free queue rotated by one makes new blocks wrong."""

    def rotate(seed: ReplaySeed) -> ReplaySeed:
        q = tuple(seed.free_queue)
        return dataclasses.replace(seed, free_queue=q[1:] + q[:1])

    caught, w = 0, generate("prefix-caching", 0, 1)
    for rec, _full, sampled in _reseeded_views(w, rotate):
        bs = w.config.block_size
        allocates = any(n.block_ids[n.num_computed_tokens // bs :] for n in rec.output.scheduled_new_reqs) or any(
            c.new_block_ids for c in rec.output.scheduled_cached_reqs
        )
        problems = dict(sampled.decision_problems or ())
        assert allocates or not problems, (rec.step, problems)
        caught += bool(problems.get(BLOCK_CHOICE))
    assert caught >= 3
