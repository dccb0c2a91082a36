"""`schedspec check` rejects a trace whose steps do not follow from one another.

Every bad trace here is a good reference trace with one thing broken by
hand, the way a cut log or a hand-edited file breaks: a step dropped or
renumbered, computed tokens that jump past their grant or move while the
request was not scheduled, a cut trace still labelled "drained", no steps
at all. Each must fail through the CLI, naming the step and the field. The
other half is exactness: the consistency rules must accept every trace the
engines really produce, so every family runs through them, the feature
families included, each with a check that its tricky case (rejected drafts,
prefix hits, an absorbed older step) really occurred and really is checked.
"""

from __future__ import annotations

import copy
import json

import pytest

from schedspec.cli import main
from schedspec.conformance.workloads.families import FAMILIES, generate
from schedspec.reference_impl import simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.invariants import check_trace
from schedspec.spec.invariants.consistency import RULE_NAMES, check_consistency
from schedspec.spec.request import Request
from schedspec.spec.trace import Trace
from schedspec.spec.workload import Workload, WorkloadRequest


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> dict:
    """seed-preemption's trace, written by the CLI as a user would."""
    path = tmp_path_factory.mktemp("good") / "t.json"
    assert main(["simulate", "seed-preemption", "--out", str(path)]) == 0
    return json.loads(path.read_text())


def check(data: dict, tmp_path, capsys) -> tuple[int, str, str]:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(data))
    capsys.readouterr()
    rc = main(["check", str(path)])
    out, err = capsys.readouterr()
    return rc, out, err


def first_violation(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("first violation: ")]
    assert len(lines) == 1, out
    return lines[0]


def test_good_trace_passes(good, tmp_path, capsys):
    rc, out, err = check(good, tmp_path, capsys)
    assert rc == 0, out
    assert "violated" not in out and err == ""
    for rule in RULE_NAMES:  # each rule is its own row
        assert rule in out


def _survivor(data: dict, scheduled: bool) -> tuple[int, str]:
    """The first step with a request live before and after it, scheduled in it or not, and not preempted."""
    for i in range(1, len(data["steps"])):
        before, rec = data["steps"][i - 1]["state"]["requests"], data["steps"][i]
        grants = dict(rec["output"]["num_scheduled_tokens"])
        for rid in rec["state"]["requests"]:
            if rid in before and (rid in grants) == scheduled and rid not in rec["output"]["preempted_req_ids"]:
                return i, rid
    raise AssertionError("the fixture trace has no such step")


def drop_step(data):
    del data["steps"][5]
    return 5, "steps[5].step"


def renumber(data):
    data["steps"][3]["step"] = 7
    return 3, "steps[3].step"


def jump_past_grant(data):
    i, rid = _survivor(data, scheduled=True)
    data["steps"][i]["state"]["requests"][rid]["num_computed_tokens"] += 1
    return i, f"steps[{i}].state.requests[{rid}].num_computed_tokens"


def move_unscheduled(data):
    i, rid = _survivor(data, scheduled=False)
    data["steps"][i]["state"]["requests"][rid]["num_computed_tokens"] += 2
    return i, f"steps[{i}].state.requests[{rid}].num_computed_tokens"


def cut_but_drained(data):
    assert data["end"] == "drained" and len(data["steps"]) > 21
    del data["steps"][21:]
    return 20, "end"


def cut_but_max_steps(data):
    del data["steps"][21:]
    data["end"] = "max_steps"
    return 20, "workload.max_steps"


def no_steps(data):
    data["steps"] = []
    return 0, "steps"


def drop_and_renumber(data):
    """The splice that step numbers cannot see: the step after it must not follow from the one before."""
    del data["steps"][5]
    for i, rec in enumerate(data["steps"]):
        rec["step"] = i
    return 5, "steps[5]."


def lost_arrival(data):
    data["steps"][0]["added"].pop()
    return 0, "steps[0].added"


def tokens_from_nowhere(data):
    i, rid = _survivor(data, scheduled=False)
    data["steps"][i]["state"]["requests"][rid]["num_tokens"] += 1
    return i, f"steps[{i}].state.requests[{rid}].num_tokens"


def vanished(data):
    i, rid = _survivor(data, scheduled=False)
    state = data["steps"][i]["state"]
    del state["requests"][rid]
    for queue in ("running", "waiting"):
        state[queue] = [r for r in state[queue] if r != rid]
    return i, f"steps[{i}].state.requests"


@pytest.mark.parametrize(
    "tamper",
    [
        drop_step,
        renumber,
        drop_and_renumber,
        jump_past_grant,
        move_unscheduled,
        tokens_from_nowhere,
        lost_arrival,
        vanished,
        cut_but_drained,
        cut_but_max_steps,
        no_steps,
    ],
)
def test_inconsistent_trace_is_rejected(good, tmp_path, capsys, tamper):
    data = copy.deepcopy(good)
    step, field = tamper(data)
    rc, out, _ = check(data, tmp_path, capsys)
    assert rc == 1, out
    line = first_violation(out)
    assert line.startswith(f"first violation: step {step}: trace-"), line
    assert field in line, line


def test_async_in_flight_tampering_is_a_violation_not_a_crash(tmp_path, capsys):
    trace = simulate(generate("async", 0, 0))
    i = _absorbs(trace)[0]
    data = trace.to_json()
    data["steps"][i - 1]["in_flight"] = [i + 500]  # a step that does not exist: the replay must not look it up
    rc, out, _ = check(data, tmp_path, capsys)
    assert rc == 1
    assert first_violation(out).startswith(f"first violation: step {i - 1}: trace-in-flight: steps[{i - 1}].in_flight")


def test_budget_detail_says_sum_and_budget(good):
    data = copy.deepcopy(good)
    rec = next(s for s in data["steps"] if s["output"]["num_scheduled_tokens"])
    budget = Trace.from_json(data).workload.config.token_budget
    rec["output"]["num_scheduled_tokens"][0][1] += budget
    total = sum(n for _, n in rec["output"]["num_scheduled_tokens"])
    broken = {v.invariant: v for v in check_trace(Trace.from_json(data))}
    assert broken["budget-conservation"].detail == f"scheduled {total} tokens, budget {budget}"


def test_long_trace_reports_progress(tmp_path, capsys):
    """D1's livelock never drains, so the trace has exactly max_steps steps, and check says it is alive."""
    cfg = SchedulerConfig(block_size=16, num_gpu_blocks=3)
    w = Workload(cfg, (WorkloadRequest(Request("0", (0,) * 32, max_tokens=16, ignore_eos=True)),), max_steps=2100)
    trace = simulate(w)
    assert trace.end == "max_steps"
    rc, out, err = check(trace.to_json(), tmp_path, capsys)
    assert rc == 0, out
    lines = err.splitlines()
    for what in ("consistency", "invariants"):
        assert [line for line in lines if f": {what}: " in line] == [
            f"schedspec check: {what}: {n}/2100 steps" for n in (1000, 2000)
        ]


# Exactness: the engines' own traces, every family.


def _rejects(trace: Trace) -> list[tuple[int, str, int]]:
    """(step, request, rejected drafts) for each sync step whose update rejected drafts of a survivor."""
    found = []
    for i, rec in enumerate(trace.steps):
        for rid, drafts in rec.output.scheduled_spec_decode_tokens.items():
            returned = rec.model_output.sampled_token_ids.get(rid, ())
            if returned and len(returned) - 1 < len(drafts) and rid in rec.state.requests:
                found.append((i, rid, len(drafts) - len(returned) + 1))
    return found


def _hits(trace: Trace) -> list[tuple[int, str, int]]:
    return [
        (i, n.req_id, n.num_computed_tokens)
        for i, rec in enumerate(trace.steps)
        for n in rec.output.scheduled_new_reqs
        if n.num_computed_tokens > 0 and n.req_id in rec.state.requests
    ]


def _absorbs(trace: Trace) -> list[int]:
    return [i for i, rec in enumerate(trace.steps) if rec.updated_step is not None and rec.updated_step != rec.step]


def _first(traces: list[Trace], find) -> tuple[Trace, object]:
    return next((t, find(t)[0]) for t in traces if find(t))


def _caught(trace: Trace, edit) -> list:
    data = trace.to_json()
    edit(data)
    return check_consistency(Trace.from_json(data))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_reference_traces_are_consistent(family):
    traces = [simulate(generate(family, 0, index)) for index in range(6)]
    for trace in traces:
        assert check_consistency(trace) == [], trace.workload.name
    # The branch each feature family exists for occurred, and breaking it is caught.
    if family == "spec-decode":
        trace, (i, rid, n) = _first(traces, _rejects)
        broken = _caught(
            trace,
            lambda d: d["steps"][i]["state"]["requests"][rid].__setitem__(
                "num_computed_tokens", d["steps"][i]["state"]["requests"][rid]["num_computed_tokens"] + n
            ),
        )
        assert broken and "rejected" in broken[0].detail
    if family == "prefix-caching":
        trace, (i, rid, hit) = _first(traces, _hits)
        broken = _caught(
            trace,
            lambda d: d["steps"][i]["state"]["requests"][rid].__setitem__(
                "num_computed_tokens", d["steps"][i]["state"]["requests"][rid]["num_computed_tokens"] - hit
            ),
        )
        assert broken and f"{hit} hit on admission" in broken[0].detail
    if family == "async":
        trace, i = _first(traces, _absorbs)
        broken = _caught(trace, lambda d: d["steps"][i].__setitem__("updated_step", None))
        assert [v.invariant for v in broken][:1] == ["trace-in-flight"]


@pytest.mark.parametrize("family", ["kv-pressure", "prefix-caching", "spec-decode", "async"])
def test_torch_engine_traces_are_consistent(family):
    from schedspec.gpu_impl.engine import TorchEngine
    from schedspec.spec.engine import run

    for index in range(2):
        w = generate(family, 1, index)
        trace = run(TorchEngine(w.config), w)
        assert check_consistency(trace) == [], w.name


def test_check_on_a_workload_says_it_is_a_workload(tmp_path, capsys):
    """It once said `trace.engine: is required`, which names a symptom, not the mistake."""
    from schedspec.conformance.workloads.builtin import BUILTIN

    path = tmp_path / "w.json"
    path.write_text(json.dumps(BUILTIN["seed-preemption"]().to_json()))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "is a workload, not a trace" in err and "\n" not in err
