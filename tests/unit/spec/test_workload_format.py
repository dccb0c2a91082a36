"""Workload and trace JSON: one-line errors naming the JSON path, lossless round trips."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings, strategies as st

from schedspec.conformance.workloads.builtin import BUILTIN
from schedspec.reference_impl import simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.errors import SpecError
from schedspec.spec.request import Request
from schedspec.spec.trace import Trace
from schedspec.spec.workload import Abort, Workload, WorkloadRequest


def base_json() -> dict:
    return {
        "version": 1,
        "name": "t",
        "config": {"max_num_batched_tokens": 64, "max_num_seqs": 4, "block_size": 4, "num_gpu_blocks": 20},
        "requests": [
            {"request_id": "a", "prompt_token_ids": [1, 2, 3], "max_tokens": 4},
            {"request_id": "b", "prompt_token_ids": [4, 5], "max_tokens": 2, "arrival_step": 1},
        ],
        "aborts": [{"step": 2, "request_id": "a"}],
    }


def rich_workload() -> Workload:
    cfg = SchedulerConfig(
        max_num_batched_tokens=64,
        max_num_seqs=4,
        block_size=4,
        num_gpu_blocks=12,
        policy="priority",
        long_prefill_token_threshold=8,
        watermark=0.1,
    )
    reqs = (
        WorkloadRequest(
            Request(
                "a",
                (1, 2, 3, 4, 5),
                max_tokens=6,
                min_tokens=2,
                eos_token_id=9,
                stop_token_ids=(8, 11),
                priority=3,
                arrival_time=0.5,
            ),
            0,
            (5, 6, 9),
        ),
        WorkloadRequest(
            Request("b", (7,) * 20, max_tokens=3, eos_token_id=None, ignore_eos=True, priority=-1, arrival_time=2.0),
            1,
            (),
        ),
        WorkloadRequest(Request("c", (3,) * 30, max_tokens=10, eos_token_id=2), 2, (1, 2)),
    )
    return Workload(
        cfg, reqs, aborts=(Abort(4, "c"),), name="rich", description="all fields", max_steps=50, filler_token_id=13
    )


def expect_error(data, where_suffix: str, value=None):
    with pytest.raises(SpecError) as exc:
        Workload.from_json(data)
    err = exc.value
    assert "\n" not in str(err)
    assert err.where == f"workload{where_suffix}", str(err)
    assert str(err).startswith(f"workload{where_suffix}:")
    if value is not None:
        assert repr(value) in str(err)
    return err


def test_valid_base_json_loads():
    """Control for the error tests below: the unmodified document is valid."""
    w = Workload.from_json(base_json())
    assert [r.request_id for r in w.requests] == ["a", "b"]
    assert w.config.max_num_seqs == 4
    assert w.requests[0].request.arrival_time == 0.0 and w.requests[1].request.arrival_time == 1.0


@pytest.mark.parametrize("field", ["request_id", "prompt_token_ids", "max_tokens"])
def test_missing_request_field(field):
    """A missing required request field names its JSON path, e.g. workload.requests[1].max_tokens."""
    data = base_json()
    del data["requests"][1][field]
    expect_error(data, f".requests[1].{field}")


def test_missing_top_level_field():
    data = base_json()
    del data["config"]
    expect_error(data, ".config")


@pytest.mark.parametrize(
    "path,value",
    [
        (("requests", 0, "max_tokens"), "4"),
        (("requests", 0, "prompt_token_ids"), "abc"),
        (("requests", 1, "ignore_eos"), "no"),
        (("requests", 1, "priority"), 1.5),
        (("aborts", 0, "step"), "2"),
        (("max_steps",), 0),
    ],
)
def test_wrong_type(path, value):
    """A value of the wrong type names its JSON path and shows the value."""
    data = base_json()
    target = data
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    suffix = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
    expect_error(data, suffix, value)


def test_bad_config_field_in_workload():
    """A bad config value inside a workload names workload.config.<field>."""
    data = base_json()
    data["config"]["max_num_seqs"] = 0
    expect_error(data, ".config.max_num_seqs", 0)
    data = base_json()
    data["config"]["polcy"] = "fcfs"
    expect_error(data, ".config.polcy")


def test_abort_of_unknown_request():
    """An abort naming no request of the workload -> workload.aborts[0].request_id."""
    data = base_json()
    data["aborts"][0]["request_id"] = "zzz"
    expect_error(data, ".aborts[0].request_id", "zzz")


@pytest.mark.parametrize("length", [64, 65])
def test_prompt_not_shorter_than_max_model_len(length):
    """§2.3/§9.A.1: a generate prompt of L or more is rejected upstream (L = 64 here)."""
    data = base_json()
    data["requests"][0]["prompt_token_ids"] = [1] * length
    err = expect_error(data, ".requests[0].prompt_token_ids")
    assert "64" in str(err)


def test_prompt_of_L_minus_1_is_accepted():
    data = base_json()
    data["requests"][0]["prompt_token_ids"] = [1] * 63
    Workload.from_json(data)


def test_duplicate_request_ids():
    """Two requests with one id -> the later one's request_id is named."""
    data = base_json()
    data["requests"][1]["request_id"] = "a"
    expect_error(data, ".requests[1].request_id", "a")


def test_min_tokens_above_max_tokens():
    """SamplingParams: min_tokens <= max_tokens."""
    data = base_json()
    data["requests"][0]["min_tokens"] = 5
    expect_error(data, ".requests[0].min_tokens", 5)


def test_unknown_field():
    data = base_json()
    data["requests"][0]["max_token"] = 3
    expect_error(data, ".requests[0].max_token", 3)


def test_error_path_uses_the_file_name(tmp_path):
    """Workload.load names the file in the error path."""
    data = base_json()
    data["aborts"][0]["request_id"] = "zzz"
    p = tmp_path / "w.json"
    p.write_text(json.dumps(data))
    with pytest.raises(SpecError) as exc:
        Workload.load(str(p))
    assert str(p) in exc.value.where
    assert exc.value.where.endswith(".aborts[0].request_id")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("make", [rich_workload, *BUILTIN.values()], ids=["rich", *BUILTIN])
def test_workload_round_trip(make):
    """Workload.from_json(w.to_json()) == w, also through JSON text."""
    w = make()
    assert Workload.from_json(w.to_json()) == w
    assert Workload.from_json(json.loads(json.dumps(w.to_json()))) == w


def test_workload_from_json_does_not_mutate_input():
    data = base_json()
    snapshot = copy.deepcopy(data)
    Workload.from_json(data)
    assert data == snapshot


@pytest.mark.parametrize("make", [rich_workload, BUILTIN["seed-preemption"]], ids=["rich", "seed-preemption"])
def test_trace_round_trip(make):
    """Trace.from_json(t.to_json()).to_json() == t.to_json(), also through JSON text; the trace validates its schema."""
    trace = simulate(make())
    j = trace.to_json()
    assert Trace.from_json(j).to_json() == j
    assert Trace.from_json(json.loads(json.dumps(j))).to_json() == j
    assert Trace.from_json(j).workload == trace.workload


def test_trace_with_livelock_round_trips():
    """D1's trace (end == "max_steps", preemptions) round-trips too."""
    cfg = SchedulerConfig(num_gpu_blocks=3)
    w = Workload(cfg, (WorkloadRequest(Request("0", (0,) * 32, max_tokens=16)),), max_steps=5)
    trace = simulate(w)
    assert trace.end == "max_steps"
    j = trace.to_json()
    assert Trace.from_json(json.loads(json.dumps(j))).to_json() == j


def test_malformed_trace_names_path():
    """A malformed trace is a one-line SpecError naming the JSON path."""
    j = simulate(rich_workload()).to_json()
    bad = copy.deepcopy(j)
    del bad["steps"][1]["state"]
    with pytest.raises(SpecError) as exc:
        Trace.from_json(bad)
    assert exc.value.where == "trace.steps[1].state" and "\n" not in str(exc.value)
    bad = copy.deepcopy(j)
    bad["steps"][0]["finished"] = {"a": {"status": "FINISHED_BOGUS", "output_token_ids": []}}
    with pytest.raises(SpecError) as exc:
        Trace.from_json(bad)
    assert exc.value.where.startswith("trace.steps[0]")


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_an_arrival_time_is_accepted_exactly_when_it_is_finite(t):
    """JSON's NaN and Infinity parse; a NaN arrival once let the reference's own trace fail four invariants."""
    import math

    data = {"version": 1, "config": {}, "requests": [{"request_id": "a", "prompt_token_ids": [1], "max_tokens": 1,
                                                       "arrival_time": t}]}  # fmt: skip
    if math.isfinite(t):
        assert Workload.from_json(data).requests[0].request.arrival_time == t
    else:
        with pytest.raises(SpecError, match=r"requests\[0\]\.arrival_time: must be a finite number"):
            Workload.from_json(data)
