"""Every answer is typed at the boundary, by the same check `check` reads a trace with.

Property-style: from real answers of the reference (each answer type, every
field), one value is drawn and given a wrong type (a string, `True`, a
float, None, a list), or a required field is dropped. The boundary
(`snapshot.decode`, which isolated, in-process and batch engines all go
through) must call it malformed, naming the field and the value's type, and
`check` must refuse the same value in a trace file, streamed or loaded
whole: the two can never disagree on what a valid value is.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from schedspec.conformance.engines.snapshot import decode
from schedspec.conformance.workloads.builtin import BUILTIN
from schedspec.reference_impl import simulate
from schedspec.spec.errors import InfrastructureError, SpecError
from schedspec.spec.trace import Trace
from schedspec.spec.trace_stream import open_trace

# Objects keyed by request id, whose entries are not fields.
MAPS = {("requests",), ("scheduled_spec_decode_tokens",)}
# Each method, and where its answer sits in a step record's JSON.
ANSWER_OF = {"schedule": "output", "summary": "state", "update_from_output": "finished"}


@cache
def traces() -> tuple[dict[str, Any], ...]:
    return tuple(
        simulate(BUILTIN[name]()).to_json() for name in ("seed-preemption", "seed-priority", "version-spec-caching")
    )


def leaves(x: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """Every scalar in `x` with its path, and every list and object too (a whole field may be mistyped)."""
    found = [(path, x)] if path else []
    if isinstance(x, dict):
        for k, v in x.items():
            found += leaves(v, (*path, k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            found += leaves(v, (*path, i))
    return found


def wrong_types(value: Any) -> st.SearchStrategy[Any]:
    """Values whose JSON type differs from `value`'s: none of them can be valid where `value` is."""
    candidates: list[Any] = ["1", True, 1.5, None, [1], {"x": 1}]
    if type(value) is int:
        candidates += [float(value), bool(value % 2), str(value)]
    if value is None:  # `new_block_ids` is a list or None: a list is not wrong there
        candidates = ["1", True, 1.5, {"x": 1}]
    return st.sampled_from([c for c in candidates if type(c) is not type(value)])


def set_at(x: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        x = x[key]
    x[path[-1]] = value


def path_text(path: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


@st.composite
def mistyped_answers(draw: st.DrawFn) -> tuple[str, dict[str, Any], int, tuple[Any, ...], Any]:
    trace = copy.deepcopy(draw(st.sampled_from(traces())))
    method = draw(st.sampled_from(sorted(ANSWER_OF)))
    candidates = [
        (i, p, v)
        for i, step in enumerate(trace["steps"])
        for p, v in leaves(step[ANSWER_OF[method]])
        if ANSWER_OF[method] != "finished" or len(p) > 1  # a finished map's own keys are request ids
    ]
    step, path, value = draw(st.sampled_from(candidates))
    bad = draw(wrong_types(value))
    set_at(trace["steps"][step][ANSWER_OF[method]], path, bad)
    return method, trace, step, path, bad


@settings(max_examples=250, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mistyped_answers())
def test_a_mistyped_answer_is_malformed_at_the_boundary_and_refused_by_check(tmp_path_factory, case):
    method, trace, step, path, bad = case
    answer = trace["steps"][step][ANSWER_OF[method]]
    with pytest.raises(InfrastructureError) as raised:
        decode(method, answer)
    e = raised.value
    assert e.kind == "malformed"
    # The field, the value and its type; a wrong element inside a wrong container names the container.
    assert e.where.startswith(f"{method}()") and path_text(path).startswith(e.where[len(f"{method}()") :])
    if e.where == f"{method}(){path_text(path)}":
        assert type(bad).__name__ in e.why and repr(bad)[:20] in e.why

    with pytest.raises(SpecError):
        Trace.from_json(trace)
    file = tmp_path_factory.mktemp("t") / "trace.json"
    file.write_text(json.dumps(trace))
    with pytest.raises(SpecError):
        for _ in open_trace(str(file)).steps:
            pass


@settings(max_examples=100, derandomize=True, deadline=None)
@given(st.sampled_from(traces()), st.data())
def test_a_missing_field_is_malformed_at_the_boundary(trace, data):
    method = data.draw(st.sampled_from(["schedule", "summary"]))
    answer = copy.deepcopy(data.draw(st.sampled_from(trace["steps"]))[ANSWER_OF[method]])
    objects = [(p, v) for p, v in [((), answer), *leaves(answer)] if isinstance(v, dict) and v and p[-1:] not in MAPS]
    path, obj = data.draw(st.sampled_from(objects))
    key = data.draw(st.sampled_from(sorted(obj)))
    if key == "scheduled_spec_decode_tokens" or (key == "resumed" and "block_ids" in obj):
        return  # optional fields
    del obj[key]
    with pytest.raises(InfrastructureError) as raised:
        decode(method, answer)
    assert raised.value.kind == "malformed" and key in raised.value.where


def test_the_real_answers_pass():
    """The check is no blanket refusal: every answer the reference gave is valid."""
    for trace in traces():
        for step in trace["steps"]:
            for method, part in ANSWER_OF.items():
                decode(method, step[part])
            for finished in step["finished"].values():
                decode("abort_request", finished)
    decode("abort_request", None)


@pytest.mark.parametrize("method", ["schedule", "summary", "update_from_output"])
def test_a_vllm_driver_reply_is_typed_by_the_same_check(method):
    """The vLLM driver's replies (what `changelog` and `certify --engine vllm` read) pass the same check: a
    mistyped one kills the driver as malformed, never reaches the differ."""
    from schedspec.conformance.engines.vllm import VllmEngine
    from schedspec.spec.output import ModelRunnerOutput, SchedulerOutput

    step = next(s for s in traces()[0]["steps"] if s["output"]["num_scheduled_tokens"] and s["state"]["requests"])
    reply = {"schedule": dict(step["output"]), "summary": dict(step["state"]), "update_from_output": {}}[method]
    if method == "schedule":
        reply["num_scheduled_tokens"] = [[rid, float(n)] for rid, n in reply["num_scheduled_tokens"]]
    elif method == "summary":
        reply["num_free_blocks"] = True
    else:
        reply = {"finished": {"r": {"status": "FINISHED_LENGTH_CAPPED", "output_token_ids": ["7"]}}}
    engine = object.__new__(VllmEngine)  # no driver: the reply is handed in below
    engine._proc, engine._summary, engine._step = None, None, 4
    engine._call = lambda op, timeout, **payload: copy.deepcopy(reply)
    engine.step_timeout_s = 1.0
    with pytest.raises(InfrastructureError) as raised:
        if method == "update_from_output":
            engine.update_from_output(SchedulerOutput(), ModelRunnerOutput())
        else:
            getattr(engine, method)()
    assert raised.value.kind == "malformed" and "is of type" in raised.value.why
