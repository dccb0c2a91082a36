"""The torch engine (gpu_impl/) against the reference: identical traces, at level `blocks` and beyond.

Every check compares whole traces: the lock-step differ at level `blocks`
(grants and their order, ids, queues, counters, statuses, block ids), and on
top of it the fake model's answers, the step inputs and how the trace ended.
The engine runs two ways, and both must match: `TorchEngine` (one instance
behind the Engine protocol) and `run_batch` (many workloads as the
instances of one batch, mixed configs and both policies side by side).
"""

from __future__ import annotations

import ast
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from schedspec.conformance.campaign import batched
from schedspec.conformance.campaign.certify import Options, Shard, certify, plan
from schedspec.conformance.engines.engine_spec import parse_engine
from schedspec.conformance.harness.differ import compare_records, diff
from schedspec.conformance.workloads.builtin import BUILTIN
from schedspec.conformance.workloads.families import FAMILIES, generate
from schedspec.gpu_impl import device as device_mod
from schedspec.gpu_impl.batch import run_batch
from schedspec.gpu_impl.engine import TorchEngine
from schedspec.reference_impl import ReferenceEngine, simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.engine import run
from schedspec.spec.request import Request
from schedspec.spec.trace import Trace
from schedspec.spec.workload import Abort, Workload, WorkloadRequest

GPU_IMPL = Path(__file__).resolve().parents[3] / "gpu_impl"


def cpu_engine(config: SchedulerConfig) -> TorchEngine:
    return TorchEngine(config, "cpu")


def assert_same(a: Trace, b: Trace) -> None:
    d, n = compare_records(a.steps, b.steps, "blocks")
    assert d is None, f"{a.workload.name}: step {d.step}: {d.field}: {d.a!r} != {d.b!r}"
    assert a.end == b.end
    for ra, rb in zip(a.steps, b.steps):
        assert (ra.added, ra.aborted, ra.model_output) == (rb.added, rb.aborted, rb.model_output), ra.step
    ja, jb = a.to_json(), b.to_json()
    ja.pop("engine"), jb.pop("engine")
    assert ja == jb


def mixed_workload(rng: random.Random, name: str) -> Workload:
    """A small workload with every knob drawn: both policies, tight pools, watermarks, gates, aborts."""
    L, seqs = rng.randint(8, 120), rng.randint(1, 8)
    config = SchedulerConfig(
        max_num_batched_tokens=max(rng.randint(seqs, 200), seqs),
        max_num_seqs=seqs,
        max_model_len=L,
        block_size=rng.choice([1, 2, 4, 16]),
        num_gpu_blocks=rng.randint(1, 48),
        long_prefill_token_threshold=rng.choice([0, rng.randint(1, L)]),
        long_prefill_token_threshold_adaptive=rng.random() < 0.3,
        policy=rng.choice(["fcfs", "priority"]),
        watermark=rng.choice([0.0, 0.1, 0.3]),
        scheduler_reserve_full_isl=rng.random() < 0.7,
        max_num_scheduled_tokens=rng.choice([None, rng.randint(1, 200)]),
        max_num_active_seqs=rng.choice([None, rng.randint(1, seqs)]),
    )
    requests = []
    for i in range(rng.randint(1, 10)):
        mt = rng.randint(1, 20)
        q = Request(
            f"r{i}",
            (5,) * rng.randint(1, L - 1),
            max_tokens=mt,
            eos_token_id=rng.choice([None, 1]),
            ignore_eos=rng.random() < 0.3,
            stop_token_ids=tuple(rng.sample(range(8), rng.randint(0, 2))),
            priority=rng.randint(-1, 3),
            arrival_time=float(rng.randint(0, 5)),
        )
        requests.append(
            WorkloadRequest(q, rng.randint(0, 8), tuple(rng.randint(0, 8) for _ in range(rng.randint(0, mt))))
        )
    aborts = tuple(Abort(rng.randint(0, 20), rng.choice(requests).request_id) for _ in range(rng.randint(0, 3)))
    return Workload(
        config, tuple(requests), aborts, name=name, max_steps=rng.randint(10, 100), filler_token_id=rng.randint(0, 8)
    )


@pytest.mark.parametrize("name", list(BUILTIN))
def test_builtin_workloads_match_in_lock_step(name):
    result = diff(BUILTIN[name](), ReferenceEngine, cpu_engine, "blocks", None)
    assert result.divergence is None, result.divergence
    assert result.steps_compared > 0


def test_builtin_workloads_match_as_one_batch():
    workloads = [make() for make in BUILTIN.values()]
    for w, t in zip(workloads, run_batch(workloads, "cpu")):
        assert_same(simulate(w), t)


def test_generated_campaign_matches_in_one_batch():
    workloads = [generate(f, 11, i) for i in range(12) for f in FAMILIES]
    traces = run_batch(workloads, "cpu")
    for w, t in zip(workloads, traces):
        assert_same(simulate(w), t)


def test_mixed_configs_and_both_policies_in_one_batch():
    rng = random.Random(2026)
    workloads = [mixed_workload(rng, f"m{i}") for i in range(150)]
    assert {w.config.policy for w in workloads} == {"fcfs", "priority"}
    traces = run_batch(workloads, "cpu")
    preempting = 0
    for w, t in zip(workloads, traces):
        ref = simulate(w)
        assert_same(ref, t)
        preempting += sum(bool(r.output.preempted_req_ids) for r in ref.steps)
    assert preempting > 20  # the batch really exercised preemption


def test_lock_step_engine_matches_on_mixed_workloads():
    rng = random.Random(7)
    for i in range(25):
        w = mixed_workload(rng, f"l{i}")
        assert_same(simulate(w), run(cpu_engine(w.config), w))


def _two(policy: str, requests: list[tuple[str, int, int, int, float]], blocks: int, bs: int = 4) -> Workload:
    config = SchedulerConfig(
        max_num_batched_tokens=64, max_num_seqs=8, max_model_len=64, block_size=bs, num_gpu_blocks=blocks, policy=policy
    )
    reqs = tuple(
        WorkloadRequest(Request(rid, (9,) * n, max_tokens=mt, ignore_eos=True, priority=p, arrival_time=t))
        for rid, n, mt, p, t in requests
    )
    return Workload(config, reqs, name=f"{policy}-{blocks}", max_steps=60)


@pytest.mark.parametrize(
    "workload",
    [
        # P1 (§8b): B (priority 9) must grow; PRIORITY preempts B itself and continues.
        _two("priority", [("B", 7, 12, 9, 0.0), ("A", 4, 12, 0, 1.0), ("C", 6, 12, 1, 2.0)], blocks=6),
        _two("fcfs", [("B", 7, 12, 9, 0.0), ("A", 4, 12, 0, 1.0), ("C", 6, 12, 1, 2.0)], blocks=6),
        # exp3: four 8-token requests on 8 usable blocks; all need a third block at once (FCFS tail victims).
        _two("fcfs", [(f"{i}", 8, 10, 0, float(i)) for i in range(4)], blocks=9),
        # A PRIORITY victim scheduled earlier in the same step: its grant is refunded, its new blocks freed.
        _two("priority", [("X", 3, 12, 9, 0.0), ("Y", 4, 12, 0, 1.0), ("Z", 5, 12, 5, 2.0)], blocks=5, bs=2),
    ],
)
def test_directed_preemption_scenarios(workload):
    assert_same(simulate(workload), run(cpu_engine(workload.config), workload))
    assert_same(simulate(workload), run_batch([workload], "cpu")[0])


def test_free_queue_order_and_block_ids():
    """D5: A [1,2,3] and B [4,5] finish; the queue becomes [5,4,3,2,1,6,...]; the next request gets [5,4,3]."""
    config = SchedulerConfig(
        max_num_batched_tokens=64, max_num_seqs=4, max_model_len=64, block_size=4, num_gpu_blocks=11
    )
    reqs = (
        WorkloadRequest(Request("A", (1,) * 12, max_tokens=1)),
        WorkloadRequest(Request("B", (1,) * 8, max_tokens=1)),
        WorkloadRequest(Request("C", (1,) * 12, max_tokens=1), arrival_step=1),
    )
    trace = run_batch([Workload(config, reqs)], "cpu")[0]
    assert trace.steps[1].output.scheduled_new_reqs[0].block_ids == (5, 4, 3)
    assert_same(simulate(Workload(config, reqs)), trace)


def test_capacity_grows_beyond_the_initial_slots_and_table_width():
    w = BUILTIN["seed-long-prompt"]()  # 201 requests, a 20000-token prompt: 1250 blocks in one table
    engine = cpu_engine(w.config)
    assert_same(simulate(w), run(engine, w))
    assert engine.st.R >= 201 and engine.st.W >= 1250


def test_slots_grow_while_an_async_step_is_in_flight():
    # The 17th arrival doubles the 16 slots between a schedule() and the update that absorbs it.
    config = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=32, num_gpu_blocks=200, async_scheduling=True)
    reqs = tuple(WorkloadRequest(Request(f"r{i}", (1,), max_tokens=2), arrival_step=i) for i in range(17))
    w = Workload(config, reqs)
    engine = cpu_engine(config)
    assert_same(simulate(w), run(engine, w))
    assert engine.st.R == 32


def test_device_choice(monkeypatch):
    monkeypatch.setenv(device_mod.ENV, "cpu")
    assert TorchEngine(SchedulerConfig()).device == torch.device("cpu")
    monkeypatch.delenv(device_mod.ENV)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert device_mod.pick_device().type == expected


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu():
    workloads = [generate(f, 4, i) for i in range(4) for f in FAMILIES]
    for a, b in zip(run_batch(workloads, "cpu"), run_batch(workloads, "cuda")):
        assert_same(a, b)


def test_gpu_impl_never_imports_the_reference():
    for path in GPU_IMPL.glob("*.py"):  # siblings, `..spec`, torch and the standard library only
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                assert (node.module or "").split(".")[0] == "spec", (path.name, node.module)
            assert not (isinstance(node, ast.ImportFrom) and node.level > 2), path.name
            absolute = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            assert not any(m.startswith("schedspec") for m in absolute), (path.name, absolute)
    code = (
        "import sys, schedspec.gpu_impl.engine, schedspec.gpu_impl.batch; "
        "assert not any(m.startswith('schedspec.reference_impl') for m in sys.modules), 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def torch_plan(tmp_path, families, workloads, seed, options=None):
    """The campaign of the torch engine against the reference, every workload of it."""
    engines = parse_engine("torch"), parse_engine("reference")
    return plan(*engines, "blocks", families, workloads, seed, Shard(0, 1), str(tmp_path), options or Options())


def test_batched_certify_reports_a_planted_bug(tmp_path, monkeypatch):
    """A bug in the free order (blocks freed front to back) must fail the certificate, with a counterexample."""
    from schedspec.gpu_impl import block_pool, update

    real = block_pool.push_free

    def forward_free(st, slots, mask):
        return real(st, slots.flip(1), mask.flip(1))

    monkeypatch.setattr(update, "push_free", forward_free)
    tasks = torch_plan(tmp_path, ["big-batch"], 2, 0, Options(shrink_budget=20))
    assert batched.applicable(tasks)
    cert, results = certify(parse_engine("torch"), tasks=tasks, out_dir=str(tmp_path), workloads=2)
    assert not cert["passed"] and cert["counterexamples"]
    assert all(os.path.exists(c["file"]) for c in cert["counterexamples"])


def test_lock_step_mode_still_available(monkeypatch, tmp_path):
    monkeypatch.setenv(batched.LOCKSTEP_ENV, "1")
    tasks = torch_plan(tmp_path, list(FAMILIES), 9, 1)
    assert not batched.applicable(tasks)
    cert, _ = certify(parse_engine("torch"), tasks=tasks, out_dir=str(tmp_path), workloads=9)
    assert cert["passed"] and cert["workloads_run"] == 9
    _every_part_timed(cert)


def _every_part_timed(cert):
    """The certificate says where the time went: each part's share of the workloads' summed seconds."""
    t = cert["time_shares"]
    assert list(t["shares"]) == ["oracle", "engine", "differ", "monitors", "other"]
    assert t["seconds"] > 0 and abs(sum(t["shares"].values()) - 1) < 0.01
    assert all(t["shares"][p] > 0 for p in ("oracle", "engine", "differ", "monitors"))


def test_batched_certify_times_every_part(tmp_path):
    tasks = torch_plan(tmp_path, list(FAMILIES), 9, 1)
    assert batched.applicable(tasks)
    cert, _ = certify(parse_engine("torch"), tasks=tasks, out_dir=str(tmp_path), workloads=9)
    assert cert["passed"]
    _every_part_timed(cert)


def test_batched_certify_reports_a_divergence_that_only_the_batch_shows(tmp_path, monkeypatch):
    """If lock-step does not reproduce a batched divergence, the batch itself is wrong: still a failure."""
    from schedspec.gpu_impl import batch

    real = batch.fake_model

    def off_by_one(st, *args):  # a bug in the batched runner's fake model only; TorchEngine never uses it
        tokens, count = real(st, *args)
        return tokens + 1, count

    monkeypatch.setattr(batch, "fake_model", off_by_one)
    tasks = torch_plan(tmp_path, ["budget"], 2, 0, Options(shrink_budget=20))
    cert, results = certify(parse_engine("torch"), tasks=tasks, out_dir=str(tmp_path), workloads=2)
    assert not cert["passed"] and len(cert["counterexamples"]) == 2
    assert all(os.path.exists(c["file"]) for c in cert["counterexamples"])
