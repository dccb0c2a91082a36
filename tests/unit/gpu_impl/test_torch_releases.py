"""The torch engine follows each instance's vLLM release, as the reference does, with releases mixed in one batch.

`SchedulerConfig.vllm_version` picks the release (`spec/versions.py`); the
torch engine turns it into one bool column per variant when the batch is
built (`gpu_impl/state.py`), and its twins read the columns. The checks are
whole traces against the reference (`assert_same` of
`test_torch_engine.py`): the built-in workload of every variant at every
release, the campaign's generated workloads at every older release, a
"+VARIANT" release string, random workloads at random releases, and the
grant floor of a request pushed past L - 1 by min_tokens before 0.29.0.
Everything runs both as one mixed batch (`run_batch`) and, for a sample,
lock-step behind the Engine protocol (`TorchEngine` through `spec.engine.run`).
"""

from __future__ import annotations

import random

import pytest
from test_torch_engine import assert_same

from schedspec.conformance.workloads.families import FAMILIES, at_release, generate
from schedspec.conformance.workloads.release_examples import VERSION_WORKLOADS, at
from schedspec.gpu_impl.batch import build_state, run_batch
from schedspec.gpu_impl.engine import TorchEngine
from schedspec.gpu_impl.state import release_column
from schedspec.reference_impl import simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.engine import run
from schedspec.spec.errors import SpecError
from schedspec.spec.request import Request
from schedspec.spec.versions import DEFAULT_RELEASE, RELEASES, VARIANTS, holds, problem
from schedspec.spec.workload import Abort, Workload, WorkloadRequest

OLDER = tuple(r for r in RELEASES if r != DEFAULT_RELEASE)
PER_FAMILY = 3  # generated workloads per family and older release


def version_workloads() -> list[Workload]:
    return [at(make(), v) for make in VERSION_WORKLOADS.values() for v in RELEASES]


@pytest.mark.parametrize("name", list(VERSION_WORKLOADS))
@pytest.mark.parametrize("release", RELEASES)
def test_version_workloads_match_lock_step_at_every_release(name, release):
    w = at(VERSION_WORKLOADS[name](), release)
    assert_same(simulate(w), run(TorchEngine(w.config, "cpu"), w))


def test_version_workloads_match_as_one_batch_of_mixed_releases():
    workloads = version_workloads()
    assert {w.config.vllm_version for w in workloads} == set(RELEASES)
    for w, t in zip(workloads, run_batch(workloads, "cpu")):
        assert_same(simulate(w), t)


def test_each_variant_moves_the_torch_engine():
    """The variant's own workload differs across its release, on the torch engine too (the column reaches it)."""
    for v in VARIANTS:
        if v.config_only:
            continue
        before = RELEASES[RELEASES.index(v.since) - 1]
        pair = [at(VERSION_WORKLOADS[v.workload](), r) for r in (before, v.since)]
        old, new = run_batch(pair, "cpu")
        assert old.to_json()["steps"] != new.to_json()["steps"], v.name


def test_generated_campaign_at_older_releases_in_one_batch():
    workloads = [at_release(generate(f, 21, i), r) for r in OLDER for f in FAMILIES for i in range(PER_FAMILY)]
    assert {w.config.vllm_version for w in workloads} == set(OLDER)
    for w, t in zip(workloads, run_batch(workloads, "cpu")):
        assert_same(simulate(w), t)


def test_a_plus_variant_release_takes_that_one_rule_early():
    """`0.32.0+priority-self-preemption-continues` is 0.32.0 with 0.33.0's continue, and nothing else moved."""
    workloads = []
    for v in VARIANTS:
        if v.config_only:
            continue
        before = RELEASES[RELEASES.index(v.since) - 1]
        early = f"{before}+{v.name}"
        assert problem(early) is None
        workloads += [at(VERSION_WORKLOADS[v.workload](), r) for r in (before, early, v.since)]
    traces = run_batch(workloads, "cpu")
    for w, t in zip(workloads, traces):
        assert_same(simulate(w), t)
    for i in range(0, len(traces), 3):
        before, early, since = (t.to_json()["steps"] for t in traces[i : i + 3])
        assert early != before and early == since, workloads[i].name
    w = at(VERSION_WORKLOADS["version-self-preemption"](), "0.32.0+priority-self-preemption-continues")
    assert_same(simulate(w), run(TorchEngine(w.config, "cpu"), w))


def test_release_columns_are_computed_once_per_instance():
    configs = ["0.28.0", "0.30.0+lone-request-threshold-off", DEFAULT_RELEASE]
    workloads = [Workload(SchedulerConfig(vllm_version=v), ()) for v in configs]
    st = build_state(workloads, "cpu")
    for v in VARIANTS:
        assert getattr(st, release_column(v.name)).tolist() == [holds(v.name, c) for c in configs], v.name
    assert st.older == {v.name for v in VARIANTS}  # 0.28.0 lacks every one
    assert build_state(workloads[2:], "cpu").older == frozenset()


def test_a_min_tokens_request_past_L_is_granted_zero_before_0_29():
    """Before 0.29.0 min_tokens holds back the L cap: `a` stalls at T = L, is preempted by `b`'s growth, recomputes
    all 12 tokens and samples a 13th past L = 12; from then on its grant is floored at 0, never negative."""
    for caching in (False, True):
        config = SchedulerConfig(
            max_num_batched_tokens=64,
            max_model_len=12,
            block_size=4,
            num_gpu_blocks=6,
            enable_prefix_caching=caching,
            vllm_version="0.28.0",
        )
        reqs = (
            WorkloadRequest(Request("b", (3,) * 2, max_tokens=9, ignore_eos=True)),
            WorkloadRequest(Request("a", (5,) * 7, max_tokens=10, min_tokens=10, ignore_eos=True)),
        )
        w = Workload(config, reqs, name=f"past-L-{caching}", max_steps=30)
        ref = simulate(w)
        assert ref.steps[-1].state.requests["a"].num_tokens == 13 > config.max_model_len
        assert_same(ref, run_batch([w], "cpu")[0])
        assert_same(ref, run(TorchEngine(config, "cpu"), w))


def random_release(rng: random.Random) -> str:
    base = rng.choice(RELEASES)
    early = [v.name for v in VARIANTS if not v.config_only and problem(f"{base}+{v.name}") is None]
    return "+".join([base] + [n for n in early if rng.random() < 0.3])


def random_workload(rng: random.Random, name: str) -> Workload | None:
    """Small, tight and feature-mixed, at a random release: min_tokens, padding, preemption and caching meet often."""
    L, seqs, k = rng.randint(6, 40), rng.randint(1, 6), rng.choice([0, 0, 1, 2, 3])
    try:
        config = SchedulerConfig(
            max_num_batched_tokens=max(rng.randint(seqs, 80), 2 + k),
            max_num_seqs=seqs,
            max_model_len=L,
            block_size=rng.choice([1, 2, 4]),
            num_gpu_blocks=rng.randint(3, 30),
            long_prefill_token_threshold=rng.choice([0, rng.randint(1, L)]),
            policy=rng.choice(["fcfs", "priority"]),
            watermark=rng.choice([0.0, 0.1]),
            scheduler_reserve_full_isl=rng.random() < 0.5,
            enable_prefix_caching=rng.random() < 0.4,
            num_speculative_tokens=k,
            async_scheduling=rng.random() < 0.3,
            vllm_version=random_release(rng),
        )
    except SpecError:  # async with spec decode before 0.33.0
        return None
    reqs = []
    for i in range(rng.randint(1, 8)):
        mt = rng.randint(1, 2 * L)
        q = Request(
            f"r{i}",
            (rng.choice([(5,), (5, 6), (7,)]) * L)[: rng.randint(1, L - 1)],
            max_tokens=mt,
            min_tokens=rng.choice([0, rng.randint(0, mt)]),
            eos_token_id=rng.choice([None, 1]),
            ignore_eos=rng.random() < 0.3,
            stop_token_ids=tuple(rng.sample(range(8), rng.randint(0, 2))),
            priority=rng.randint(0, 2),
            arrival_time=float(rng.randint(0, 5)),
        )
        outputs = tuple(rng.randint(0, 8) for _ in range(rng.randint(0, mt)))
        proposals = tuple((k, rng.randint(0, k)) for _ in range(rng.randint(0, 6))) if k else ()
        reqs.append(WorkloadRequest(q, rng.randint(0, 6), outputs, spec_proposals=proposals))
    aborts = tuple(Abort(rng.randint(0, 20), rng.choice(reqs).request_id) for _ in range(rng.randint(0, 2)))
    return Workload(
        config, tuple(reqs), aborts, name=name, max_steps=rng.randint(20, 80), filler_token_id=rng.randint(0, 8)
    )


def test_random_workloads_at_random_releases():
    rng = random.Random(2028)
    workloads = [w for i in range(200) if (w := random_workload(rng, f"v{i}")) is not None]
    assert len({w.config.vllm_version for w in workloads}) > len(RELEASES)  # "+VARIANT" strings among them
    for w, t in zip(workloads, run_batch(workloads, "cpu")):
        assert_same(simulate(w), t)
    for w in workloads[:20]:
        assert_same(simulate(w), run(TorchEngine(w.config, "cpu"), w))
