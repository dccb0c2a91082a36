"""`schedspec check` reads a trace a step at a time, and judges it exactly as the whole-load path does.

The streamed reader must give the very `StepRecord`s `Trace.load` gives,
whatever the window size (a window of one byte cuts every value, number and
multi-byte character somewhere), on the traces schedspec writes and on
compact JSON. A file it cannot stream (`steps` before the head, keys after
`steps`) is loaded whole, with the same verdict. A cut or corrupted file is
one line naming the step, never a traceback. And the one pass that feeds
each step to both checkers must find what `check_consistency` and
`check_trace` find apart, violation for violation.
"""

from __future__ import annotations

import copy
import json

import pytest

from schedspec.cli import main
from schedspec.conformance.workloads.families import generate
from schedspec.reference_impl import simulate
from schedspec.spec import trace_stream
from schedspec.spec.errors import SpecError
from schedspec.spec.invariants import check_trace
from schedspec.spec.invariants.consistency import check_consistency
from schedspec.spec.invariants.onepass import check_all
from schedspec.spec.jsonio import write_json_atomic
from schedspec.spec.request import Request
from schedspec.spec.step_shape import plainly_valid
from schedspec.spec.trace import Trace
from schedspec.spec.trace_stream import StreamedTrace, open_trace
from schedspec.spec.workload import Workload, WorkloadRequest

FAMILIES = ["kv-pressure", "async", "spec-decode", "prefix-caching"]


@pytest.fixture(scope="module")
def traces() -> dict[str, Trace]:
    return {family: simulate(generate(family, 0, 3)) for family in FAMILIES}


def compact(data: dict) -> tuple[str, list[tuple[int, int]]]:
    """`data` as one line of JSON, steps last, and where each step's text starts and ends."""
    head = json.dumps({k: v for k, v in data.items() if k != "steps"}, ensure_ascii=False)
    text, spans = head[:-1] + ', "steps": [', []
    for i, step in enumerate(data["steps"]):
        text += ", " if i else ""
        spans.append((len(text), len(text) + len(json.dumps(step, ensure_ascii=False))))
        text += json.dumps(step, ensure_ascii=False)
    return text + "]}", spans


def error_line(capsys, path) -> str:
    capsys.readouterr()
    assert main(["check", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("schedspec: error: "), lines
    return lines[0]


@pytest.mark.parametrize("family", FAMILIES)
def test_streamed_records_are_the_loaded_ones(family, traces, tmp_path, monkeypatch):
    trace = traces[family]
    written = tmp_path / "written.json"
    write_json_atomic(written, trace.to_json())  # the layout TraceWriter reproduces byte for byte
    one_line = tmp_path / "compact.json"
    one_line.write_text(compact(trace.to_json())[0])
    for chunk in (1, 7, 4096, trace_stream.CHUNK):
        monkeypatch.setattr(trace_stream, "CHUNK", chunk)
        for path in (written, one_line):
            streamed = open_trace(str(path))
            assert isinstance(streamed, StreamedTrace)
            assert (streamed.workload, streamed.engine, streamed.end) == (trace.workload, trace.engine, trace.end)
            assert tuple(streamed.steps) == Trace.load(str(path)).steps == trace.steps
            assert tuple(streamed.steps) == trace.steps and len(streamed.steps) == len(trace.steps)  # re-iterable


def test_multibyte_ids_across_every_window_edge(tmp_path, monkeypatch):
    w = Workload(
        generate("kv-pressure", 0, 1).config,
        tuple(WorkloadRequest(Request(f"请求-é{i}", (5,) * 9, max_tokens=3, ignore_eos=True), i) for i in range(4)),
    )
    trace = simulate(w)
    path = tmp_path / "t.json"
    path.write_text(compact(trace.to_json())[0], encoding="utf-8")
    monkeypatch.setattr(trace_stream, "CHUNK", 1)
    assert tuple(open_trace(str(path)).steps) == trace.steps


def test_a_cut_file_names_the_step(traces, tmp_path, capsys):
    text, spans = compact(traces["async"].to_json())
    path = tmp_path / "cut.json"
    k = len(spans) // 2
    start, end = spans[k]
    for cut, where, why in [
        ((start + end) // 2, f"steps[{k}]", "is cut off"),
        (end, f"steps[{k + 1}]", f"is missing: the file ends after steps[{k}]"),
        (end + 1, f"steps[{k + 1}]", "is missing"),
        (len(text) - 1, "cut.json:trace", "does not close after its steps"),
    ]:
        path.write_text(text[:cut])
        line = error_line(capsys, path)
        assert f"cut.json:trace.{where}: {why}" in line or f"{where}: {why}" in line, line
    path.write_text(text[: spans[0][0] - 3])  # inside the head: loaded whole, worded as any bad JSON
    assert "is not valid JSON" in error_line(capsys, path)


def test_garbage_in_a_step_names_the_step(traces, tmp_path, capsys):
    text, spans = compact(traces["spec-decode"].to_json())
    start, end = spans[4]
    path = tmp_path / "bad.json"
    path.write_text(text[: start + 40] + "#oops" + text[start + 45 :])
    line = error_line(capsys, path)
    assert "bad.json:trace.steps[4]: is not valid JSON at line 1" in line, line
    inside = spans[5][0] + 10
    path.write_bytes(text[:inside].encode() + b"\xff" + text[inside:].encode())
    assert "bad.json:trace.steps[5]: is not UTF-8 text" in error_line(capsys, path)
    path.write_text(text[:end] + " ; " + text[end + 1 :])
    assert "bad.json:trace.steps[4]: is followed by neither ',' nor ']'" in error_line(capsys, path)


def test_schema_and_id_errors_read_as_whole_load_words_them(traces, tmp_path):
    base = traces["kv-pressure"].to_json()
    edits = [
        lambda d: d["steps"][3]["state"].__setitem__("running", 5),
        lambda d: d["steps"][2].__setitem__("surprise", 1),
        lambda d: d["steps"][1]["output"].pop("preempted_req_ids"),
        lambda d: d["steps"][2]["state"]["waiting"].append("nobody"),
        lambda d: d["steps"][0]["finished"].__setitem__(
            d["workload"]["requests"][0]["request_id"], {"status": "NOT_A_STATUS", "output_token_ids": []}
        ),
        lambda d: d.__setitem__("end", "sometime"),
    ]
    for edit in edits:
        data = copy.deepcopy(base)
        edit(data)
        path = tmp_path / "t.json"
        path.write_text(json.dumps(data))
        with pytest.raises(SpecError) as whole:
            Trace.load(str(path))
        with pytest.raises(SpecError) as streamed:
            tuple(open_trace(str(path)).steps)
        assert str(streamed.value) == str(whole.value)


def test_other_key_orders_are_loaded_whole(traces, tmp_path, capsys):
    data = traces["prefix-caching"].to_json()
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"steps": data["steps"], **{k: v for k, v in data.items() if k != "steps"}}))
    assert isinstance(open_trace(str(path)), Trace)
    assert main(["check", str(path)]) == 0
    # A key after the steps overrides the head, as in any JSON reader: "max_steps" on a drained run is a violation.
    path.write_text(compact(data)[0][:-1] + ', "end": "max_steps"}')
    capsys.readouterr()
    assert main(["check", str(path)]) == 1
    assert "trace-end" in capsys.readouterr().out
    assert Trace.load(str(path)).end == "max_steps"


def _tampered(trace: Trace):
    data = trace.to_json()
    steps = data["steps"]
    live = next(i for i in range(1, len(steps)) if steps[i]["state"]["requests"])
    rid = next(iter(steps[live]["state"]["requests"]))
    yield "as run", data
    for name, edit in [
        ("drop a step", lambda d: d["steps"].pop(live)),
        ("bump C", lambda d: d["steps"][live]["state"]["requests"][rid].__setitem__("num_computed_tokens", 10**6)),
        (
            "report twice",
            lambda d: d["steps"][-1]["output"]["finished_req_ids"].extend(
                d["steps"][-2]["output"]["finished_req_ids"] or [rid]
            ),
        ),
        ("lose a block", lambda d: d["steps"][live]["state"].__setitem__("num_free_blocks", 0)),
        ("cut", lambda d: d["steps"].__delitem__(slice(live + 1, None))),
        (
            "swap queues",
            lambda d: d["steps"][live]["state"].__setitem__("waiting", d["steps"][live]["state"]["running"]),
        ),
    ]:
        tampered = copy.deepcopy(data)
        edit(tampered)
        yield name, tampered


@pytest.mark.parametrize("family", FAMILIES)
def test_one_pass_finds_what_the_two_checkers_find(family, traces, tmp_path):
    some_broken = False
    for name, data in _tampered(traces[family]):
        path = tmp_path / "t.json"
        path.write_text(json.dumps(data))
        whole = Trace.load(str(path))
        checked = check_all(open_trace(str(path)))
        assert checked.inconsistent == check_consistency(whole), name
        assert checked.violations == check_trace(whole), name
        assert checked.num_steps == len(whole.steps)
        some_broken |= bool(checked.inconsistent and checked.violations)
    assert some_broken


def test_the_quick_shape_test_is_never_laxer_than_the_schema(traces):
    """`plainly_valid` may only say True where jsonschema does: it decides which steps skip jsonschema."""
    schema_steps = trace_stream.validators()[1]
    step = traces["spec-decode"].to_json()["steps"][5]
    async_step = next(s for s in traces["async"].to_json()["steps"] if "in_flight" in s)
    variants = []
    for base in (step, async_step):
        variants.append(base)
        for path, _value in _leaves(base):
            for bad in (None, -1, 1.5, True, "X", [], {}, [None], {"x": None}, "status\n"):
                variants.append(_replaced(base, path, bad))
            if path and isinstance(path[-1], str):
                variants.append(_replaced(base, path, _DROP))
    accepted = 0
    for v in variants:
        if plainly_valid(v):
            accepted += 1
            assert schema_steps.is_valid(v), v
    assert accepted > 1 and accepted < len(variants)
    assert all(plainly_valid(s) for t in traces.values() for s in t.to_json()["steps"])


_DROP = object()


def _leaves(x, path=()):
    yield path, x
    if isinstance(x, dict):
        for k, v in list(x.items())[:3]:
            yield from _leaves(v, path + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x[:2]):
            yield from _leaves(v, path + (i,))


def _replaced(x, path, value):
    if not path:
        return value
    x = copy.copy(x)
    if value is _DROP and len(path) == 1:
        del x[path[0]]
    else:
        x[path[0]] = _replaced(x[path[0]], path[1:], value)
    return x
