"""The torch engine's columnar Engine API (`gpu_impl/columnar.py`): deferred outputs, tensor samples, tensor outputs.

The engine loop reads every output at once, so the certificates never see an output built late. These tests
do: each step's `DeferredSchedulerOutput` is kept unread while the run goes on (the update frees its blocks,
later steps reuse them, requests arrive and are aborted), and only read at the end. Each must equal the
reference's output for that step, field by field, and so must the finished requests, whose tokens come back
from `OutputTokens`.
"""

from __future__ import annotations

import dataclasses
import pickle

import pytest
import torch

from schedspec.conformance.workloads.families import generate
from schedspec.gpu_impl.columnar import DeferredSchedulerOutput, OutputTokens, SampledTokens
from schedspec.gpu_impl.engine import TorchEngine
from schedspec.reference_impl import simulate
from schedspec.spec.output import ModelRunnerOutput, SchedulerOutput
from schedspec.spec.trace import Trace
from schedspec.spec.workload import Workload

# Sync families only: the replay below feeds each step's answer back at once. Preemption, prefix caching (blocks
# freed and reused while an output waits unread), spec decode (drafts), aborts and stops are all in them.
FAMILIES = ("kv-pressure", "priority", "prefix-caching", "spec-decode", "aborts", "stops", "mixed-fcfs-sync")


def _sync(family: str, count: int) -> list[Workload]:
    found = []
    for i in range(40):
        w = generate(family, 3, i)
        if not w.config.async_scheduling:
            found.append(w)
        if len(found) == count:
            break
    return found


def _replay_unread(workload: Workload, trace: Trace, as_tensors: bool) -> tuple[list[SchedulerOutput], list[dict]]:
    """Drive a TorchEngine through the reference's run, its answers taken from the trace, outputs left unread."""
    e = TorchEngine(workload.config, "cpu")
    outputs, finished = [], []
    for rec in trace.steps:
        for request in workload.arrivals_at(rec.step):
            e.add_request(request)
        done = {}
        for rid in rec.aborted:
            f = e.abort_request(rid)
            if f is not None:
                done[rid] = f
        out = e.schedule()
        outputs.append(out)
        answer = e.sampled_tokens(rec.model_output) if as_tensors else rec.model_output
        done.update(e.update_from_output(out, answer))
        if rec.draft_token_ids:
            e.update_draft_token_ids(rec.draft_token_ids)
        finished.append(done)
    return outputs, finished


@pytest.mark.parametrize("as_tensors", [False, True], ids=["answer-as-dict", "answer-as-tensors"])
@pytest.mark.parametrize("family", FAMILIES)
def test_outputs_read_late_equal_the_reference(family: str, as_tensors: bool) -> None:
    for workload in _sync(family, 3):
        trace = simulate(workload)
        outputs, finished = _replay_unread(workload, trace, as_tensors)
        assert all(isinstance(o, DeferredSchedulerOutput) and not o.is_built for o in outputs)
        # The total is answered from the tensors, before anything is built.
        assert [o.total_num_scheduled_tokens for o in outputs] == [
            r.output.total_num_scheduled_tokens for r in trace.steps
        ]
        assert not any(o.is_built for o in outputs)
        for o, rec, done in zip(outputs, trace.steps, finished):
            assert o == rec.output and rec.output == o, (workload.name, rec.step)
            assert o.to_json() == rec.output.to_json()
            assert done == rec.finished, (workload.name, rec.step)


def test_a_deferred_output_is_a_scheduler_output_everywhere() -> None:
    workload = _sync("kv-pressure", 1)[0]
    trace = simulate(workload)
    (out, *_), _ = _replay_unread(workload, trace, as_tensors=True)
    plain = trace.steps[0].output
    copy = pickle.loads(pickle.dumps(out))
    assert type(copy) is SchedulerOutput and copy == plain  # pickles as the plain object (worker processes)
    assert dataclasses.replace(out, preempted_req_ids=frozenset({"x"})).preempted_req_ids == {"x"}
    assert dataclasses.asdict(out) == dataclasses.asdict(plain)
    assert out != dataclasses.replace(plain, num_scheduled_tokens={})
    assert repr(out).startswith("DeferredSchedulerOutput(num_scheduled_tokens=")


def test_an_answer_for_an_unscheduled_or_unknown_request_is_ignored() -> None:
    workload = _sync("kv-pressure", 1)[0]
    trace = simulate(workload)
    e = TorchEngine(workload.config, "cpu")
    for request in workload.arrivals_at(0):
        e.add_request(request)
    rec = trace.steps[0]
    out = e.schedule()
    extra = {rid: (5,) for rid in e.slot if rid not in rec.output.num_scheduled_tokens} | {"nobody": (5,)}
    assert e.update_from_output(out, ModelRunnerOutput({**rec.model_output.sampled_token_ids, **extra})) == {}
    assert e.summary() == rec.state


def test_output_tokens_keep_what_each_slot_kept() -> None:
    kept = OutputTokens(torch.device("cpu"))
    before = torch.tensor([0, 0, 0])
    kept.record(before, torch.tensor([[7, 8], [9, 1], [4, 4]]))  # slot 0 kept 2, slot 1 kept 1, slot 2 none
    after = torch.tensor([2, 1, 0])
    kept.record(after, torch.tensor([[5, 0], [6, 3], [2, 0]]))  # then 1 more each
    assert kept.of(torch.tensor([0, 1, 2]), torch.tensor([3, 2, 1])) == [(7, 8, 5), (9, 6), (2,)]
    assert kept.of(torch.tensor([9]), torch.tensor([0])) == [()]  # a slot that never sampled
    assert kept.of(torch.tensor([], dtype=torch.int64), torch.tensor([], dtype=torch.int64)) == []


def test_sampled_tokens_are_the_answer_as_tensors() -> None:
    workload = _sync("spec-decode", 1)[0]
    e = TorchEngine(workload.config, "cpu")
    for r in workload.requests:
        e.add_request(r.request)
    out = e.schedule()
    rid = next(iter(e.slot))
    got = e.sampled_tokens(ModelRunnerOutput({rid: (3, 4)}))
    assert isinstance(got, SampledTokens)
    assert got.tokens[e.slot[rid], :2].tolist() == [3, 4] and int(got.count.sum()) == 2
    with pytest.raises(ValueError, match="sampled tokens for a request"):
        e.sampled_tokens(ModelRunnerOutput({rid: (1,) * (2 + workload.config.num_speculative_tokens)}))
    G = 1 + workload.config.num_speculative_tokens
    with pytest.raises(ValueError, match=r"SampledTokens.tokens: shape \(3, 9\)"):
        e.update_from_output(
            out, SampledTokens(torch.zeros((3, 9), dtype=torch.int64), torch.zeros(3, dtype=torch.int64))
        )
    with pytest.raises(ValueError, match=r"SampledTokens.count: shape \(2,\), expected \[3\]"):
        e.update_from_output(
            out, SampledTokens(torch.zeros((3, G), dtype=torch.int64), torch.zeros(2, dtype=torch.int64))
        )


def test_gc_paused_pauses_the_collector_for_the_call_only() -> None:
    import gc

    from schedspec.spec.engine import gc_paused

    seen = []
    step = gc_paused(lambda fail: seen.append(gc.isenabled()) or (1 / 0 if fail else "done"))
    assert gc.isenabled()
    assert step(False) == "done" and seen == [False] and gc.isenabled()
    with pytest.raises(ZeroDivisionError):
        step(True)
    assert gc.isenabled()  # restored after an exception too
    gc.disable()
    try:
        step(False)
        assert not gc.isenabled()  # a caller that paused it keeps it paused
    finally:
        gc.enable()


@pytest.mark.parametrize("family", FAMILIES + ("mixed-fcfs-async",))
def test_a_steps_columns_share_no_storage_with_the_state(family: str) -> None:
    """`columns` holds the step's tensors without copying them: sound only while none is a state tensor
    (the late reads above would catch a write into one, this names the tensor that aliases)."""
    workload = generate(family, 3, 0)
    trace = simulate(workload)
    e = TorchEngine(workload.config, "cpu")
    for rec in trace.steps:
        for request in workload.arrivals_at(rec.step):
            e.add_request(request)
        out = e.schedule()
        step_out, _ = e._pending[-1]
        state = {t.untyped_storage().data_ptr(): name for name, t in vars(e.st).items() if isinstance(t, torch.Tensor)}
        for f in dataclasses.fields(step_out):
            t = getattr(step_out, f.name)
            if isinstance(t, torch.Tensor) and f.name != "spec_vals" and t.numel():
                assert t.untyped_storage().data_ptr() not in state, (f.name, state.get(t.untyped_storage().data_ptr()))
        e.update_from_output(out, rec.model_output)
