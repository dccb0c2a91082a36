"""The torch engine on the three features: spec decode, async scheduling, prefix caching.

Scenario numbers come from §6 D2, §8 T40/T41 and §8b D3-D6,
driven through `TorchEngine` (one instance, the Engine protocol) with the
model's answers given by hand where the doc gives them. The differential
tests then hold the engine against the reference over workloads with every
feature knob drawn together (caching with async, drafts with preemption,
stale output with aborts), both as one batch and in lock-step.
"""

from __future__ import annotations

import random

import pytest
import torch

from schedspec.conformance.harness.differ import compare_records
from schedspec.conformance.workloads.families import generate
from schedspec.gpu_impl.batch import run_batch
from schedspec.gpu_impl.engine import TorchEngine
from schedspec.reference_impl import simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.engine import run
from schedspec.spec.output import ModelRunnerOutput
from schedspec.spec.request import Request, RequestStatus
from schedspec.spec.trace import Trace
from schedspec.spec.workload import Abort, Workload, WorkloadRequest


def assert_same(a: Trace, b: Trace) -> None:
    d, _ = compare_records(a.steps, b.steps, "blocks")
    assert d is None, f"{a.workload.name}: step {d.step}: {d.field}: {d.a!r} != {d.b!r}"
    ja, jb = a.to_json(), b.to_json()  # drafts, scheduled spec tokens, in-flight steps and the end too
    ja.pop("engine"), jb.pop("engine")
    assert ja == jb, a.workload.name


def engine(**kw) -> TorchEngine:
    base = dict(max_num_batched_tokens=64, max_num_seqs=8, max_model_len=128, block_size=16, num_gpu_blocks=64)
    return TorchEngine(SchedulerConfig(**{**base, **kw}), "cpu")


def state_of(e: TorchEngine, rid: str) -> tuple[int, int]:
    r = e.summary().requests[rid]
    return r.num_computed_tokens, r.num_tokens


# ---- spec decode ---------------------------------------------------------------------------------


def test_d3_rejected_drafts_roll_computed_back():
    """D3: k=3, 10-token prompt; drafts [1,2,3] scheduled as 4 tokens (C=14); [1,5] back: C=12, T=13."""
    e = engine(num_speculative_tokens=3)
    e.add_request(Request("0", (9,) * 10, max_tokens=10))
    out = e.schedule()
    assert dict(out.num_scheduled_tokens) == {"0": 10}
    e.update_from_output(out, ModelRunnerOutput({"0": (100,)}))
    assert state_of(e, "0") == (10, 11)
    e.update_draft_token_ids({"0": (1, 2, 3)})
    out = e.schedule()
    assert dict(out.num_scheduled_tokens) == {"0": 4} and out.scheduled_spec_decode_tokens == {"0": (1, 2, 3)}
    assert state_of(e, "0") == (14, 11)
    e.update_from_output(out, ModelRunnerOutput({"0": (1, 5)}))
    assert state_of(e, "0") == (12, 13)


def test_d4_max_model_len_cuts_the_drafts():
    """D4: L=16, k=4, 12-token prompt; n = min(5, 16-12-1) = 3 keeps 2 drafts; [1,2,9] caps the length."""
    e = engine(num_speculative_tokens=4, max_model_len=16)
    e.add_request(Request("0", (9,) * 12, max_tokens=10))
    out = e.schedule()
    e.update_from_output(out, ModelRunnerOutput({"0": (100,)}))
    e.update_draft_token_ids({"0": (1, 2, 3, 4)})
    out = e.schedule()
    assert dict(out.num_scheduled_tokens) == {"0": 3} and out.scheduled_spec_decode_tokens == {"0": (1, 2)}
    finished = e.update_from_output(out, ModelRunnerOutput({"0": (1, 2, 9)}))
    assert finished["0"].status == RequestStatus.FINISHED_LENGTH_CAPPED
    assert finished["0"].output_token_ids == (100, 1, 2, 9)


def test_t40_a_decode_like_admission_is_padded():
    """T40: k=3, APC, two 33-token twins; r2 hits 32 tokens, so n=1 is padded to 4 with [-1,-1,-1]."""
    e = engine(num_speculative_tokens=3, enable_prefix_caching=True)
    prompt = tuple(range(10, 43))
    e.add_request(Request("r1", prompt, max_tokens=10))
    out = e.schedule()
    assert dict(out.num_scheduled_tokens) == {"r1": 33}
    e.update_from_output(out, ModelRunnerOutput({"r1": (100,)}))
    e.update_draft_token_ids({"r1": (1, 2, 3)})
    e.add_request(Request("r2", prompt, max_tokens=10))
    out = e.schedule()
    assert dict(out.num_scheduled_tokens) == {"r1": 4, "r2": 4}
    assert out.scheduled_spec_decode_tokens == {"r1": (1, 2, 3), "r2": (-1, -1, -1)}
    assert out.scheduled_new_reqs[0].num_computed_tokens == 32


# ---- prefix caching ------------------------------------------------------------------------------


def test_d5_hit_blocks_and_the_lru_tail():
    """D5: bs=4; a 10-token request gets [1,2,3]; freed, the queue is [3,4,...,10,2,1]; a 13-token
    request with the same 8-token prefix hits [1,2] (C=8), gets [1,2,3,4] and schedules 5."""
    e = engine(enable_prefix_caching=True, block_size=4, num_gpu_blocks=11)
    e.add_request(Request("a", tuple(range(10, 20)), max_tokens=1))
    out = e.schedule()
    assert out.scheduled_new_reqs[0].block_ids == (1, 2, 3)
    e.update_from_output(out, ModelRunnerOutput({"a": (7,)}))
    assert e.summary().num_free_blocks == 10
    e.add_request(Request("b", tuple(range(10, 18)) + (1, 2, 3, 4, 5), max_tokens=1))
    out = e.schedule()
    new = out.scheduled_new_reqs[0]
    assert (new.block_ids, new.num_computed_tokens, dict(out.num_scheduled_tokens)) == ((1, 2, 3, 4), 8, {"b": 5})


@pytest.mark.parametrize("length, computed, scheduled", [(32, 16, 16), (33, 32, 1)])
def test_d6_a_hit_never_covers_the_last_token(length, computed, scheduled):
    """D6: identical prompts admitted in one step; the twin hits the first one's freshly registered
    blocks, but at most (T-1)//bs of them."""
    e = engine(enable_prefix_caching=True)
    prompt = tuple(range(10, 10 + length))
    e.add_requests([Request("a", prompt, max_tokens=4), Request("b", prompt, max_tokens=4)])
    out = e.schedule()
    assert out.scheduled_new_reqs[1].num_computed_tokens == computed
    assert out.num_scheduled_tokens["b"] == scheduled


# ---- async scheduling ----------------------------------------------------------------------------


def test_d2_placeholders_and_the_max_tokens_skip():
    """D2 (§6) and T47: prompt 10, max_tokens 3 under async: 10, 1, 1, then the skip rule; 3 outputs,
    prompt + max_tokens - 1 tokens scheduled in all."""
    config = SchedulerConfig(
        max_num_batched_tokens=64,
        max_num_seqs=4,
        max_model_len=64,
        block_size=16,
        num_gpu_blocks=16,
        async_scheduling=True,
    )
    w = Workload(config, (WorkloadRequest(Request("0", (9,) * 10, max_tokens=3), 0, (3, 4, 5)),), max_steps=20)
    for trace in (run_batch([w], "cpu")[0], run(TorchEngine(config, "cpu"), w)):
        grants = [s.output.num_scheduled_tokens.get("0", 0) for s in trace.steps]
        assert grants[:4] == [10, 1, 1, 0] and sum(grants) == 10 + 3 - 1
        done = [s.finished["0"] for s in trace.steps if "0" in s.finished]
        assert done[0].status == RequestStatus.FINISHED_LENGTH_CAPPED and done[0].output_token_ids == (3, 4, 5)
        assert_same(simulate(w), trace)


def test_t41_a_twin_hits_blocks_registered_in_the_same_step():
    """T41: async, APC, bs=16, 100-token twins: the first schedules 100, the second only 100 % 16 = 4."""
    config = SchedulerConfig(
        max_num_batched_tokens=1000,
        max_num_seqs=8,
        max_model_len=256,
        block_size=16,
        num_gpu_blocks=64,
        async_scheduling=True,
        enable_prefix_caching=True,
    )
    prompt = tuple(range(10, 110))
    w = Workload(config, tuple(WorkloadRequest(Request(f"r{i}", prompt, max_tokens=3)) for i in range(2)), max_steps=20)
    trace = run_batch([w], "cpu")[0]
    assert dict(trace.steps[0].output.num_scheduled_tokens) == {"r0": 100, "r1": 4}
    assert_same(simulate(w), trace)


# ---- differential: every knob at once --------------------------------------------------------------


def feature_workload(rng: random.Random, name: str) -> Workload:
    """Shared prompts (so caching hits), drafts, async, tight pools, both policies, stops and aborts."""
    L, bs, seqs = rng.randint(16, 96), rng.choice([1, 2, 4, 8]), rng.randint(1, 6)
    k = rng.choice([0, 0, rng.randint(1, 4)])
    thr = rng.choice([0, 0, rng.randint(1 + k, 1 + k + 12)])
    chunked = rng.random() < 0.85
    budget = max(rng.randint(2, 96), seqs, 0 if chunked else L)
    config = SchedulerConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=seqs,
        max_model_len=L,
        block_size=bs,
        num_gpu_blocks=rng.randint(3, 40),
        long_prefill_token_threshold=min(thr, L),
        policy=rng.choice(["fcfs", "priority"]),
        watermark=rng.choice([0.0, 0.0, 0.1]),
        scheduler_reserve_full_isl=rng.random() < 0.8,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=rng.random() < 0.6,
        num_speculative_tokens=k,
        async_scheduling=rng.random() < 0.5,
    )
    stems = [tuple(rng.randint(10, 13) for _ in range(rng.randint(1, 3 * bs + 2))) for _ in range(2)]
    requests = []
    for i in range(rng.randint(1, 7)):
        mt = rng.randint(1, 14)
        prompt = (rng.choice(stems) + tuple(rng.randint(10, 13) for _ in range(rng.randint(0, bs + 1))))[: L - 1]
        q = Request(
            f"r{i}",
            prompt,
            max_tokens=mt,
            eos_token_id=rng.choice([None, 2]),
            ignore_eos=rng.random() < 0.3,
            stop_token_ids=rng.choice([(), (5,)]),
            priority=rng.randint(0, 3),
            arrival_time=float(i),
        )
        planted = tuple(rng.randint(2, 13) for _ in range(rng.randint(0, mt + 1)))
        spec = (
            tuple((nd, rng.randint(0, nd)) for nd in (rng.randint(0, k) for _ in range(rng.randint(0, mt))))
            if k
            else ()
        )
        requests.append(WorkloadRequest(q, rng.randint(0, 8), planted, spec))
    aborts = tuple(Abort(rng.randint(0, 16), rng.choice(requests).request_id) for _ in range(rng.randint(0, 2)))
    return Workload(
        config, tuple(requests), aborts, name=name, max_steps=rng.randint(20, 120), filler_token_id=rng.randint(2, 13)
    )


def test_every_feature_together_in_one_batch():
    rng = random.Random(77)
    workloads = [feature_workload(rng, f"f{i}") for i in range(240)]
    preempted = hits = drafts = stale = 0
    for w, t in zip(workloads, run_batch(workloads, "cpu")):
        ref = simulate(w)
        assert_same(ref, t)
        preempted += sum(bool(s.output.preempted_req_ids) for s in ref.steps)
        hits += sum(n.num_computed_tokens > 0 for s in ref.steps for n in s.output.scheduled_new_reqs)
        drafts += sum(bool(s.output.scheduled_spec_decode_tokens) for s in ref.steps)
        stale += sum(bool(s.output.preempted_req_ids) and bool(s.in_flight) for s in ref.steps)
    assert preempted > 20 and hits > 20 and drafts > 20 and stale > 5  # the batch exercised every feature


@pytest.mark.parametrize("family", ["prefix-caching", "spec-decode", "async"])
def test_feature_families_in_one_batch(family):
    """The certify families of the three features (sync spec decode with preemption under caching among them)."""
    workloads = [generate(family, 0, i) for i in range(40)]
    for w, t in zip(workloads, run_batch(workloads, "cpu")):
        assert_same(simulate(w), t)


def test_every_feature_together_in_lock_step():
    rng = random.Random(78)
    for i in range(30):
        w = feature_workload(rng, f"l{i}")
        assert_same(simulate(w), run(TorchEngine(w.config, "cpu"), w))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_features_on_cuda_match_the_cpu():
    rng = random.Random(79)
    workloads = [feature_workload(rng, f"c{i}") for i in range(60)]
    for a, b in zip(run_batch(workloads, "cpu"), run_batch(workloads, "cuda")):
        assert_same(a, b)
