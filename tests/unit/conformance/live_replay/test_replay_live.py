"""`schedspec replay-live`: a live capture (docs/live.md) rebuilt into a workload and replayed on the reference.

The captures here are made by `capture_of` from reference runs, so a faithful
reader must find no divergence; a planted change must be found at its step and
field; a cut, corrupt, rotated or restarted capture must be read as the format
says (`conformance/live_replay/capture.py`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from schedspec.cli import main
from schedspec.conformance.live_replay.capture_write import capture_of, write_capture
from schedspec.conformance.live_replay.replay import replay_live
from schedspec.conformance.workloads.families import generate
from schedspec.reference_impl.engine import ReferenceEngine
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.engine import run
from schedspec.spec.errors import SpecError
from schedspec.spec.request import Request
from schedspec.spec.trace import Trace
from schedspec.spec.workload import Abort, Workload, WorkloadRequest

DATA = Path(__file__).resolve().parents[2] / "data" / "live"


def trace_of(workload: Workload) -> Trace:
    return run(ReferenceEngine(workload.config), workload)


def busy_steps(trace: Trace) -> int:
    """The steps a capture holds: an async loop step that neither schedules nor absorbs calls nothing."""
    return sum(1 for s in trace.steps if s.scheduled or s.updated_step is not None)


def small() -> Workload:
    """One request, prompt 5, four planted outputs, sync: steps 0..3 sample 1, 2, 3, 4; step 3 finishes it."""
    q = Request("r0", (1, 2, 3, 4, 5), max_tokens=4)
    return Workload(SchedulerConfig(), (WorkloadRequest(q, 0, (11, 12, 13, 14)),), name="small")


def write(tmp_path: Path, lines: list[dict], name: str = "cap.jsonl", **kw) -> str:
    path = str(tmp_path / name)
    write_capture(path, lines, **kw)
    return path


@pytest.mark.parametrize(
    "family,index",
    [
        ("budget", 0),
        ("kv-pressure", 1),
        ("priority", 0),
        ("aborts", 0),
        ("stops", 1),
        ("prefix-caching", 0),
        ("spec-decode", 0),
        ("spec-decode", 1),
        ("async", 0),
        ("async", 1),
        ("mixed-priority-async", 2),
        ("mixed-fcfs-sync", 0),
    ],
)
def test_a_capture_of_a_reference_run_replays_with_no_divergence(family, index, tmp_path):
    trace = trace_of(generate(family, 0, index))
    result = replay_live(write(tmp_path, capture_of(trace)))
    assert result.divergence is None
    assert result.steps_compared == busy_steps(trace) > 0
    for r in trace.workload.requests:  # every sampled token is planted where the fake model samples it
        rebuilt = result.workload.planted(r.request_id)
        assert list(rebuilt) == [trace.workload.sampled_token(r.request_id, i) for i in range(len(rebuilt))]


@pytest.mark.parametrize("family", ["spec-decode", "prefix-caching", "async"])
def test_hashed_token_ids_are_just_ids(family, tmp_path):
    trace = trace_of(generate(family, 0, 0))
    lines = capture_of(trace, hash_key=b"secret")
    assert lines[0]["hashed_token_ids"] is True
    prompt = next(line for line in lines if line["kind"] == "add")["request"]["prompt_token_ids"]
    assert prompt != list(trace.workload.requests[0].request.prompt_token_ids)
    result = replay_live(write(tmp_path, lines))
    assert result.divergence is None and result.steps_compared == busy_steps(trace)


def test_spec_proposals_are_recovered_from_drafts_and_what_was_sampled(tmp_path):
    workload = generate("spec-decode", 0, 1)
    trace = trace_of(workload)
    result = replay_live(write(tmp_path, capture_of(trace)))
    used = {r.request_id: r for r in result.workload.requests if r.spec_proposals}
    assert used, "the family proposes drafts"
    for rid, r in used.items():
        assert list(r.spec_proposals) == [workload.spec_proposal(rid, i) for i in range(len(r.spec_proposals))]


def test_a_changed_grant_is_the_first_divergence_at_its_step(tmp_path):
    lines = capture_of(trace_of(generate("kv-pressure", 0, 1)))
    sched = [line for line in lines if line["kind"] == "schedule" and line["output"]["num_scheduled_tokens"]][3]
    sched["output"]["num_scheduled_tokens"][0][1] -= 1  # as if the engine granted one token less
    d = replay_live(write(tmp_path, lines)).divergence
    assert d is not None and (d.step, d.field) == (sched["step"], "output.num_scheduled_tokens")


def test_a_changed_sampled_token_shows_where_the_output_ends(tmp_path):
    lines = capture_of(trace_of(small()))
    update = [line for line in lines if line["kind"] == "update"][1]
    assert update["sampled"] == {"r0": [12]}
    update["sampled"]["r0"] = [99]  # the model's answer disagrees with what the request finished with
    for level in ("tokens", "blocks"):
        d = replay_live(write(tmp_path, lines), level=level).divergence
        assert d is not None and (d.step, d.field) == (3, "finished[r0].output_token_ids")
        assert (d.a, d.b) == ([11, 99, 13, 14], [11, 12, 13, 14])


def test_a_changed_block_id_is_found_at_level_blocks_only(tmp_path):
    lines = capture_of(trace_of(small()))
    lines[2]["output"]["scheduled_new_reqs"][0]["block_ids"] = [7]
    d = replay_live(write(tmp_path, lines), level="blocks").divergence
    assert d is not None and (d.step, d.field) == (0, "output.scheduled_new_reqs[r0].block_ids")
    assert replay_live(write(tmp_path, lines), level="tokens").divergence is None


def test_a_capture_cut_mid_line_replays_its_complete_prefix(tmp_path):
    trace = trace_of(generate("kv-pressure", 0, 1))
    path = write(tmp_path, capture_of(trace, end=None))
    text = Path(path).read_bytes()
    Path(path).write_bytes(text[: text.rindex(b'{"kind":"update"') + 25])  # killed mid-write of an update
    result = replay_live(path)
    assert result.divergence is None
    assert 0 < result.steps_compared < busy_steps(trace)
    notes = " ".join(result.notes)
    assert "cut mid-write" in notes and "no end line" in notes and "incomplete" in notes


@pytest.mark.parametrize(
    "corrupt,where",
    [
        (lambda lines: lines.insert(3, "garbage"), r"cap\.jsonl:4: line: is not valid JSON"),
        (lambda lines: lines[0].update(version=2), r"cap\.jsonl:1: header\.version"),
        (lambda lines: lines[0].update(format="other"), r"cap\.jsonl:1: header\.format"),
        (lambda lines: lines[2].update(kind="schedul"), r"cap\.jsonl:3: line\.kind: is not one of"),
        (lambda lines: lines[2].update(step=5), r"cap\.jsonl:3: schedule\.step: must be 0"),
        (
            lambda lines: lines[2]["output"].pop("preempted_req_ids"),
            r"cap\.jsonl:3: schedule\.output\.preempted_req_ids",
        ),
        (lambda lines: lines[3].update(of_step=4), r"cap\.jsonl:4: update\.of_step"),
        (lambda lines: lines[0]["config"].update(max_num_seqs=0), r"cap\.jsonl:1: header\.config\.max_num_seqs"),
        (lambda lines: lines[1]["request"].update(max_tokens=0), r"cap\.jsonl:2: add\.request\.max_tokens"),
        (lambda lines: lines[0].update(async_scheduling=True), r"cap\.jsonl:1: header\.async_scheduling"),
    ],
)
def test_a_corrupt_capture_is_one_line_naming_file_line_and_field(corrupt, where, tmp_path, capsys):
    lines: list = capture_of(trace_of(small()))
    corrupt(lines)
    path = tmp_path / "cap.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    assert main(["replay-live", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("schedspec: error: ") and "Traceback" not in err
    assert re.search(where, err), err


def test_a_missing_middle_part_is_an_error_naming_it(tmp_path):
    paths = write(tmp_path, capture_of(trace_of(generate("budget", 0, 0))), lines_per_part=5)
    Path(f"{paths}.1").unlink()
    with pytest.raises(SpecError, match=r"cap\.jsonl\.1: is missing"):
        replay_live(paths)


def test_a_part_header_that_disagrees_with_the_session_is_an_error(tmp_path):
    path = write(tmp_path, capture_of(trace_of(generate("budget", 0, 0))), lines_per_part=5)
    part1 = Path(f"{path}.1")
    lines = part1.read_text().splitlines()
    head = json.loads(lines[0])
    head["config"]["max_num_seqs"] += 1
    part1.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    with pytest.raises(SpecError, match=r"cap\.jsonl\.1:1: header\.config: disagrees"):
        replay_live(path)
    head["config"]["max_num_seqs"] -= 1
    head["first_step"] += 1
    part1.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    with pytest.raises(SpecError, match=r"cap\.jsonl\.1:1: header\.first_step"):
        replay_live(path)


def test_a_capture_rotated_across_parts_replays_as_one(tmp_path):
    trace = trace_of(generate("kv-pressure", 0, 1))
    path = write(tmp_path, capture_of(trace), lines_per_part=7)
    result = replay_live(path)
    assert len(result.capture.parts) > 3
    assert result.divergence is None and result.steps_compared == busy_steps(trace)


def test_two_sessions_replay_the_first_and_name_the_other(tmp_path, capsys):
    first, second = trace_of(generate("budget", 0, 0)), trace_of(generate("async", 0, 1))
    lines = capture_of(first, session="a" * 32, end=None) + capture_of(second, session="b" * 32)
    path = write(tmp_path, lines[:1], name="cap.jsonl")
    Path(path).write_text("".join(json.dumps(x) + "\n" for x in lines))  # one file: the restarted server appended
    result = replay_live(path)
    assert result.session.id == "a" * 32 and result.others == ["b" * 32]
    assert result.divergence is None and result.steps_compared == busy_steps(first)
    again = replay_live(path, session="bbbb")
    assert again.divergence is None and again.steps_compared == busy_steps(second)
    assert main(["replay-live", path]) == 0
    assert "b" * 32 in capsys.readouterr().out
    with pytest.raises(SpecError, match="--session: matches no session"):
        replay_live(path, session="c")


def test_cli_writes_certify_reports_and_refuses_to_overwrite(tmp_path, capsys):
    lines = capture_of(trace_of(small()))
    lines[4]["output"]["num_scheduled_tokens"][0][1] = 2  # step 1 grants 2 tokens to a decode
    path, out = write(tmp_path, lines), tmp_path / "report"
    assert main(["replay-live", path, "--out", str(out), "--plot"]) == 1
    said = capsys.readouterr().out
    assert "diverges at step 1: output.num_scheduled_tokens" in said
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["verdict"] == "failed" and cert["counterexamples"][0]["step"] == 1
    assert cert["live"]["session"] == "0" * 32
    md = (out / "certificate.md").read_text()
    assert "FAILED" in md and "- capture: " in md and "| **1** ⟵ | **r0:1** | **r0:2** |" in md
    for name in ("junit.xml", "workload.json", "counterexample-live.json", "timeline.png"):
        assert (out / name).stat().st_size > 0
    cx = json.loads((out / "counterexample-live.json").read_text())
    assert cx["engines"] == {"a": "reference", "b": "vllm==0.33.0"}
    assert main(["replay-live", path, "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["replay-live", path, "--out", str(out), "--force", "--level", "tokens"]) == 1


def test_plot_needs_out(tmp_path, capsys):
    assert main(["replay-live", write(tmp_path, capture_of(trace_of(small()))), "--plot"]) == 2
    assert "--plot" in capsys.readouterr().err


def test_golden_capture_gives_the_golden_report(capsys, monkeypatch):
    """A small capture, with a grant the reference would not make, and the report it must give."""
    monkeypatch.chdir(DATA)
    assert main(["replay-live", "golden.jsonl", "--level", "tokens"]) == 1
    assert capsys.readouterr().out == (DATA / "golden-report.txt").read_text()


def _async_two_arrivals() -> Workload:
    """Async: r0 at step 0, r1 at step 3, while r0's outputs are in flight."""
    config = SchedulerConfig(async_scheduling=True)
    r0 = WorkloadRequest(Request("r0", (1, 2, 3, 4, 5), max_tokens=6), 0, (11, 12, 13, 14, 15, 16))
    r1 = WorkloadRequest(Request("r1", (6, 7, 8), max_tokens=3), 3, (21, 22, 23))
    return Workload(config, (r0, r1), name="two-arrivals")


def _moved_before_the_update(lines: list[dict], kind: str) -> list[dict]:
    """The first `kind` line after step 0 moved before the update just ahead of it: vLLM's tests' order."""
    i = next(n for n, x in enumerate(lines) if x["kind"] == kind and x["step"] > 0)
    j = max(n for n in range(i) if lines[n]["kind"] == "update")
    assert all(lines[n]["kind"] not in ("schedule",) for n in range(j + 1, i))
    return lines[:j] + [lines[i]] + lines[j:i] + lines[i + 1 :]


def test_an_arrival_before_the_absorbed_update_replays_as_the_next_step_s(tmp_path):
    """vLLM's async tests add a request, then absorb the previous output, then schedule: the same run."""
    trace = trace_of(_async_two_arrivals())
    lines = _moved_before_the_update(capture_of(trace), "add")
    r = replay_live(write(tmp_path, lines))
    assert r.divergence is None and r.steps_compared == busy_steps(trace)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_an_abort_between_schedule_and_its_update_replays_as_a_mid_step_abort(tmp_path, async_scheduling):
    """A client that disconnects while the model runs: EngineCore drains its aborts queue before the update. This
    was declared outside the spec (and a live replay refused it: "update: must follow its step's schedule"); it
    is modelled now (`Abort.mid_step`), and the capture replays step for step with the abort where it was."""
    w = _async_two_arrivals()
    w = w.replace(config=dataclasses.replace(w.config, async_scheduling=async_scheduling))
    trace = trace_of(w.replace(aborts=(Abort(3, "r0", mid_step=True),)))
    assert any(r.aborted_mid_step == ("r0",) for r in trace.steps)
    lines = capture_of(trace)
    kinds = [x["kind"] for x in lines]
    at = next(n for n, x in enumerate(lines) if x["kind"] == "abort")
    assert kinds[at - 1] == "schedule" and kinds[at + 1] == "update"  # as the live scheduler writes it
    r = replay_live(write(tmp_path, lines))
    assert r.divergence is None and r.steps_compared == busy_steps(trace) and not r.notes
    assert [a for a in r.workload.aborts if a.request_id == "r0"][0].mid_step


def test_a_scope_line_stops_the_replay_there_with_the_reason(tmp_path):
    trace = trace_of(_async_two_arrivals())
    lines = capture_of(trace)
    at = next(n for n, x in enumerate(lines) if x["kind"] == "add" and x["step"] > 0)
    lines.insert(at, {"kind": "scope", "step": lines[at]["step"], "feature": "schedule(throttle_prefills=True)"})
    lines[at + 1 :] = [
        {**x, "sampled": {k: [99] for k in x["sampled"]}} if x["kind"] == "update" else x for x in lines[at + 1 :]
    ]
    r = replay_live(write(tmp_path, lines))
    assert r.divergence is None and 0 < r.steps_compared < busy_steps(trace)  # what follows was never judged
    assert any("throttle_prefills" in n for n in r.notes)


@pytest.mark.parametrize("arrival", [2, 4])  # 2: added before the schedule that reports the first one's finish
def test_a_request_id_reused_after_it_finished_is_another_request(tmp_path, arrival):
    """vLLM lets a caller reuse a finished request's id (its multi-turn tests do): the replay names the second
    request `ID#2` in every line from its arrival on, and replays both."""
    first = Request("kind", (1, 2, 3), max_tokens=2)  # an id that is also a field's value: only ids are renamed
    second = Request("kind#2", (1, 2, 3, 4), max_tokens=2)
    w = Workload(SchedulerConfig(), (WorkloadRequest(first, 0, (11, 12)), WorkloadRequest(second, arrival, (13, 14))))
    trace = trace_of(w)
    lines = json.loads(json.dumps(capture_of(trace)).replace('"kind#2"', '"kind"'))  # as vLLM saw it: one id
    r = replay_live(write(tmp_path, lines))
    assert r.divergence is None and r.steps_compared == busy_steps(trace)
    assert any("'kind' is reused after it finished" in n for n in r.notes)


def test_an_async_scheduler_driven_in_lock_step_replays(tmp_path):
    """vLLM's tests drive an AsyncScheduler as schedule, then its own update; the engine loop would have called
    schedule() again first, finding nothing (the one token is in flight). The capture lacks that call only."""
    w = Workload(
        SchedulerConfig(async_scheduling=True), (WorkloadRequest(Request("p", (1, 2, 3, 4), max_tokens=1), 0, (9,)),)
    )
    full = capture_of(trace_of(w))
    header, add, schedule0 = full[:3]
    update0 = next(x for x in full if x["kind"] == "update" and x["of_step"] == 0)
    lines = [header, add, schedule0, {**update0, "step": 0}, {"kind": "end", "step": 1, "reason": "shutdown"}]
    r = replay_live(write(tmp_path, lines))
    assert r.divergence is None and r.steps_compared == 2


def test_an_output_absorbed_without_a_schedule_before_it_is_declared(tmp_path):
    """vLLM's async tests schedule twice, then absorb both outputs with no schedule() between; the engine loop
    would have scheduled the request still owed tokens. Declared at that step, never a divergence."""
    w = Workload(
        SchedulerConfig(async_scheduling=True),
        (WorkloadRequest(Request("r", (1, 2, 3), max_tokens=5), 0, (9, 9, 9, 9, 9)),),
    )
    full = capture_of(trace_of(w))
    header, add, s0, s1 = full[:4]
    u0 = next(x for x in full if x["kind"] == "update" and x["of_step"] == 0)
    u1 = next(x for x in full if x["kind"] == "update" and x["of_step"] == 1)
    lines = [header, add, s0, s1, u0, {**u1, "step": 1}, {"kind": "end", "step": 2, "reason": "shutdown"}]
    r = replay_live(write(tmp_path, lines))
    assert r.divergence is None and r.steps_compared == 2
    assert any("an output absorbed with no schedule()" in n for n in r.notes)
