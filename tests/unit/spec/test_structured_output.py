"""Structured output's grammar wait, in the spec and the reference: the workload format, the wait, the error path,
and the release that changed where a blocked request waits (`docs/features.md`, "Structured output")."""

from __future__ import annotations

import json

import pytest

from schedspec.cli import main
from schedspec.conformance.workloads.release_examples import VERSION_WORKLOADS, at
from schedspec.reference_impl import simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.errors import SpecError
from schedspec.spec.invariants import check_trace
from schedspec.spec.request import Request, RequestStatus
from schedspec.spec.trace import Trace
from schedspec.spec.workload import Grammar, Workload, WorkloadRequest

CONFIG = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_gpu_blocks=32)


def req(rid, grammar=None, at=0, max_tokens=2):
    return WorkloadRequest(Request(rid, (1, 2, 3, 4, 5), max_tokens, ignore_eos=True), at, (), (), grammar)


def granted(trace):
    return [dict(s.output.num_scheduled_tokens) for s in trace.steps]


def test_a_grammar_in_the_workload_sets_structured_output_and_round_trips():
    w = Workload(CONFIG, (req("g", Grammar(2)), req("p")))
    assert w.requests[0].request.structured_output and not w.requests[1].request.structured_output
    data = w.to_json()
    assert data["requests"][0]["grammar"] == {"ready_step": 2, "fails": False} and "grammar" not in data["requests"][1]
    assert Workload.from_json(json.loads(json.dumps(data))) == w
    assert w.grammars_at(2) == [("g", True)] and w.last_event_step == 2


@pytest.mark.parametrize(
    "change, field",
    [
        ({"grammar": {"ready_step": 0}, "arrival_step": 3}, "requests[0].grammar.ready_step"),
        ({"structured_output": True}, "requests[0].structured_output"),
        ({"grammar": {"ready_step": 1, "fails": "no"}}, "requests[0].grammar.fails"),
        ({"grammar": {"ready_step": 1, "when": 2}}, "requests[0].grammar.when"),
    ],
)
def test_a_bad_grammar_is_one_line_naming_the_field(change, field):
    data = Workload(CONFIG, (req("g"),)).to_json()
    data["requests"][0].update(change)
    with pytest.raises(SpecError) as e:
        Workload.from_json(data)
    assert field in str(e.value) and "\n" not in str(e.value)


def test_a_grammar_that_never_compiles_in_time_is_refused_as_idle(tmp_path, capsys):
    path = tmp_path / "w.json"
    w = Workload(CONFIG, (req("g", Grammar(50)),), max_steps=40)
    path.write_text(json.dumps(w.to_json()))
    assert main(["simulate", str(path), "--out", str(tmp_path / "t.json")]) == 2
    assert "grammar.ready_step" in capsys.readouterr().err


def test_the_pass_skips_a_compiling_grammar_and_admits_it_once_compiled():
    trace = simulate(Workload(CONFIG, (req("g", Grammar(2)), req("p"))))
    steps = granted(trace)
    assert steps[0] == {"p": 5} and "g" not in steps[1] and steps[2]["g"] == 5
    assert trace.steps[0].state.requests["g"].status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
    assert trace.steps[0].state.requests["g"].grammar == "compiling"
    assert trace.steps[2].grammars == {"g": True} and trace.steps[2].state.requests["g"].grammar == "compiled"
    assert check_trace(trace) == []


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_failed_grammar_finishes_with_an_error_at_the_next_update(async_scheduling):
    config = SchedulerConfig(**{**CONFIG.to_dict(), "async_scheduling": async_scheduling})
    trace = simulate(Workload(config, (req("g", Grammar(1, fails=True)), req("p", max_tokens=8))))
    ended = [(s.step, f.status, f.output_token_ids) for s in trace.steps for rid, f in s.finished.items() if rid == "g"]
    assert ended == [(1, RequestStatus.FINISHED_ERROR, ())]  # the pass at step 1 found it; the update of step 1
    assert all("g" not in s.output.num_scheduled_tokens for s in trace.steps)
    assert check_trace(trace) == []
    again = Trace.from_json(json.loads(json.dumps(trace.to_json())))
    assert again.steps[1].grammars == {"g": False}


def test_before_0_31_a_blocked_arrival_is_walked_first():
    """`one-waiting-queue`: the release workload, pinned on both sides (real vLLM agrees: docs/versions.md)."""
    make = VERSION_WORKLOADS["version-grammar-queue"]
    old, new = simulate(at(make(), "0.30.0")), simulate(at(make(), "0.31.0"))
    assert granted(old)[:2] == [{"g": 8}, {"a": 8}] and old.steps[0].state.num_skipped_waiting == 0
    assert granted(new)[:3] == [{"a": 8}, {"a": 1, "b": 7}, {"b": 1, "g": 7}]
    assert check_trace(old) == [] and check_trace(new) == []
