"""Rebuilding a live capture's workload, and its steps as records: the first half of `replay-live`.

See `live_replay.py` for how each part of the workload is recovered from the capture's lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ...spec.controls import Control, ControlCall
from ...spec.errors import SpecError
from ...spec.output import ModelRunnerOutput, SchedulerOutput
from ...spec.request import Request, RequestStatus
from ...spec.trace import FinishedRequest, StateSummary, StepRecord
from ...spec.workload import DEFAULT_FILLER_TOKEN_ID, Abort, Grammar, Workload, WorkloadRequest
from .capture import Line, Session


@dataclass
class _LoopStep:
    """One step of the engine loop as the capture shows it."""

    adds: list[Line] = field(default_factory=list)
    aborts: list[Line] = field(default_factory=list)
    schedule: Line | None = None
    mid_step_aborts: list[Line] = field(default_factory=list)  # after the schedule, before the update
    controls: list[Line] = field(default_factory=list)  # calls outside schedule(), inputs of the step
    update: Line | None = None
    drafts: Line | None = None


def renamed_reuses(lines: list[Line], notes: list[str]) -> list[Line]:
    """The lines with a request id that is added again after it finished renamed from there on (`ID#2`, ...).

    vLLM lets a caller reuse the id of a finished request (its tests do); a
    workload's ids are unique. The second request is another request, so it
    gets a name of its own, in every later line that names it, except where a
    schedule's `finished_req_ids` still reports the first one's finish.
    """
    added: dict[str, int] = {}  # id as vLLM knows it -> how many requests have carried it
    finished: set[str] = set()
    alias: dict[str, str] = {}
    unreported: dict[str, str] = {}  # id as vLLM knows it -> the name its finished request had, not yet reported
    original: dict[str, str] = {}  # every new name -> the id vLLM knows
    out: list[Line] = []
    for line in lines:
        d = line.data
        if line.kind == "add":
            rid = d["request"]["request_id"]
            if rid in added and rid in finished:
                added[rid] += 1
                alias[rid] = f"{rid}#{added[rid]}"
                original[alias[rid]] = rid
                finished.discard(rid)
                notes.append(f"request id {rid!r} is reused after it finished: the new request is {alias[rid]!r}")
            added.setdefault(rid, 1)
        if alias:
            data = _renamed(d, alias)
            if line.kind == "schedule":  # a finish reported now may be the earlier request's
                data["output"]["finished_req_ids"] = [
                    unreported.pop(rid, alias.get(rid, rid)) for rid in d["output"]["finished_req_ids"]
                ]
            line = Line(line.path, line.lineno, data)
        elif line.kind == "schedule":
            for rid in d["output"]["finished_req_ids"]:
                unreported.pop(rid, None)
        out.append(line)
        if line.kind in ("update", "abort"):
            for name in line.data.get("finished", {}):
                finished.add(original.get(name, name))
                unreported[original.get(name, name)] = name
    return out


NOT_IDS = ("kind", "status", "feature", "reason")  # the string fields of a line that never hold a request id
KEYED_BY_ID = ("sampled", "finished", "draft_token_ids", "scheduled_spec_decode_tokens")  # maps: request id -> ...


def _renamed(value: Any, alias: Mapping[str, str], keyed: bool = False) -> Any:
    """`value` with every request id of `alias` renamed: a string value, or a key of a map keyed by id."""
    if isinstance(value, dict):
        return {
            (alias.get(k, k) if keyed else k): v if k in NOT_IDS and not keyed else _renamed(v, alias, k in KEYED_BY_ID)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_renamed(v, alias) for v in value]
    return alias.get(value, value) if isinstance(value, str) else value


def _loop_steps(s: Session, notes: list[str]) -> list[_LoopStep]:
    """The capture's lines cut into engine-loop steps; an incomplete last step is left out."""
    out: list[_LoopStep] = []
    cur, schedules, pending = _LoopStep(), 0, set[int]()
    queued = s.config.max_concurrent_batches > 1  # a batch queue: async scheduling or pipeline parallel
    for line in renamed_reuses(s.lines, notes):
        kind, d = line.kind, line.data
        if kind == "scope":  # what follows is outside the spec: declared, never judged
            notes.append(
                f"from step {d['step']} the session is outside what the spec models ({d['feature']}): "
                "the steps before it are replayed, the rest is not"
            )
            if cur.schedule is not None and cur.update is None:
                cur = _LoopStep()  # its update came after the declaration: the step is incomplete
            break
        if kind == "abort" and _drains_before_update(s, cur):
            # EngineCore's aborts queue, drained after the model ran and before this step's update.
            if d["step"] != schedules:
                raise SpecError(
                    line.at("abort.step"), d["step"], f"must be {schedules}, the schedule() calls before it"
                )
            cur.mid_step_aborts.append(line)
            continue
        inputs = ("add", "abort", "control", "schedule")
        if kind in inputs and (cur.schedule or cur.update) or kind == "update" and cur.update:
            out.append(cur)
            cur = _LoopStep()
        if kind in inputs and d["step"] != schedules:
            raise SpecError(line.at(f"{kind}.step"), d["step"], f"must be {schedules}, the schedule() calls before it")
        if kind == "control":
            cur.controls.append(line)
        elif kind == "add":
            cur.adds.append(line)
        elif kind == "abort":
            cur.aborts.append(line)
        elif kind == "schedule":
            cur.schedule, schedules = line, schedules + 1
            pending.add(d["step"])
        elif kind == "update":
            if d["of_step"] not in pending or d["of_step"] > d["step"]:
                raise SpecError(
                    line.at("update.of_step"), d["of_step"], "names no schedule() still awaiting its output"
                )
            if not queued and cur.schedule is None:
                raise SpecError(line.at("update"), d["of_step"], "must follow its step's schedule (synchronous)")
            pending.discard(d["of_step"])
            mine = cur.schedule
            own = mine is not None and mine.data["step"] == d["of_step"] and cur.update is None
            if queued and own and mine is not None and mine.data["output"]["num_scheduled_tokens"]:
                # An async scheduler driven in lock-step (schedule, then its own update): the engine loop fills
                # its batch queue first, so this update is the next step's, after a schedule() the capture
                # lacks because the caller never made it (the spec's loop makes it, and it may find nothing).
                out.append(cur)
                cur = _LoopStep(update=line)
                continue
            late = queued and cur.schedule is None and out
            if late and cur.aborts and not cur.adds and out[-1].schedule is not None and out[-1].update is None:
                # Async: aborts between a schedule and the update that follows it are that step's mid-step aborts
                # (EngineCore drains its aborts queue before the update); only the update tells them apart from
                # the next step's, so they are placed now.
                out[-1].mid_step_aborts, out[-1].update = cur.aborts, line
                cur = _LoopStep()
                continue
            if late and cur.adds and out[-1].schedule is not None and out[-1].update is None:
                # Arrivals before the engine absorbed the previous step's output (vLLM's own tests add a request,
                # then update): the update is that step's, as the engine loop has it. The two commute: the update
                # touches only requests already scheduled, and the new ones are not.
                out[-1].update = line
                continue
            cur.update = line
        elif kind == "drafts":
            cur.drafts = line
    out.append(cur)
    last = out[-1]
    incomplete = last.update is None and (last.schedule is None or not queued or s.truncated)
    if incomplete or (
        s.end is not None and s.end.data["reason"] in ("capture-full", "wrapper-error") and last.update is None
    ):
        out.pop()
        if last.schedule is not None or last.update is not None:
            notes.append(f"the last step ({len(out)}) is incomplete in the capture and is not replayed")
    return out


def rebuild(s: Session) -> tuple[Workload, list[StepRecord], set[int], list[str]]:
    """The session's workload, its captured steps as records, the steps whose sampled tokens the capture
    holds (an output still in flight at the end has none), and notes on what could not be kept exactly."""
    notes: list[str] = []
    loop = _loop_steps(s, notes)
    requests: dict[str, tuple[Request, int, Line]] = {}
    aborts: list[Abort] = []
    outputs: dict[int, SchedulerOutput] = {}  # schedule() index -> its output
    index_of: dict[int, int] = {}  # schedule() index -> loop step
    for i, st in enumerate(loop):
        for line in st.adds:
            q = _request(line, len(requests))
            if q.request_id in requests:
                raise SpecError(line.at("add.request.request_id"), q.request_id, "is added twice")
            requests[q.request_id] = (q, i, line)
        # An abort of a request not yet added did nothing in vLLM; the workload applies a step's aborts after its
        # arrivals, so it is left out rather than let it abort an arrival that came after it.
        for line in st.aborts:
            aborts += [
                Abort(i, rid, status=_finished_as(line, rid))
                for rid in line.data["request_ids"]
                if _added_before(requests, rid, i, line)
            ]
        for line in st.mid_step_aborts:
            aborts += [
                Abort(i, rid, mid_step=True, status=_finished_as(line, rid))
                for rid in line.data["request_ids"]
                if _added_before(requests, rid, i, line)
            ]
        if st.schedule is not None:
            outputs[st.schedule.data["step"]] = SchedulerOutput.from_json(st.schedule.data["output"])
            index_of[st.schedule.data["step"]] = i
    prompt = {rid: q.num_prompt_tokens for rid, (q, _, _) in requests.items()}
    planted: dict[str, dict[int, int]] = {rid: {} for rid in requests}
    positions: dict[tuple[int, str], int] = {}
    for st in loop:
        if st.update is None:
            continue
        u = st.update
        out = outputs[u.data["of_step"]]
        for rid, toks in u.data["sampled"].items():
            if not toks:
                continue
            pos = _position(out, rid, prompt, u)
            positions[(u.data["of_step"], rid)] = pos
            for j, t in enumerate(toks):  # the first sample at a position stays: a later step that disagrees diverges
                old = planted[rid].setdefault(pos + j, t)
                if old != t:
                    notes.append(f"{rid} sampled {old} then {t} at output position {pos + j}: the replay plants {old}")

    def truth(rid: str, pos: int) -> int:
        return planted[rid].get(pos, DEFAULT_FILLER_TOKEN_ID)

    proposals: dict[str, list[tuple[int, int]]] = {rid: [] for rid in requests}
    if s.config.num_speculative_tokens > 0 and not s.config.async_scheduling:
        for st in loop:
            if st.update is None:
                continue
            finished = st.update.data.get("finished", {})
            drafts = st.drafts.data["draft_token_ids"] if st.drafts is not None else {}
            for rid, toks in st.update.data["sampled"].items():
                if not toks or rid in finished:
                    continue
                proposed = drafts.get(rid, [])
                start = positions[(st.update.data["of_step"], rid)] + len(toks)
                proposals[rid].append(
                    (len(proposed), _leading(proposed, [truth(rid, start + j) for j in range(len(proposed))]))
                )
    workload = _workload(s, loop, requests, aborts, planted, proposals)
    captured = [_record(i, st, outputs, index_of, loop, s, prompt, truth) for i, st in enumerate(loop)]
    known = {index_of[st.update.data["of_step"]] for st in loop if st.update is not None}
    return workload, captured, known, notes


def _grammar(found: tuple[int, bool] | None, num_steps: int) -> Grammar:
    if found is None:
        return Grammar(num_steps)
    return Grammar(found[0], fails=not found[1])


def _request(line: Line, index: int) -> Request:
    return Request.from_json(line.data["request"], default_arrival_time=index)


def _position(out: SchedulerOutput, rid: str, prompt: Mapping[str, int], u: Line) -> int:
    """The output position the fake model samples `rid` at in the step of `out`: `C - drafts - prompt`."""
    before = _computed_before(out)
    if rid not in out.num_scheduled_tokens or rid not in before or rid not in prompt:
        raise SpecError(
            u.at(f"update.sampled.{rid}"), rid, f"names a request step {u.data['of_step']} did not schedule"
        )
    pos = before[rid] + out.num_scheduled_tokens[rid] - len(out.scheduled_spec_decode_tokens.get(rid, ())) - prompt[rid]
    if pos < 0:
        raise SpecError(
            u.at(f"update.sampled.{rid}"), pos, "is sampled inside the prompt (a partial prefill samples nothing)"
        )
    return pos


def _leading(drafts: Any, truths: list[int]) -> int:
    n = 0
    while n < len(drafts) and drafts[n] == truths[n]:
        n += 1
    return n


def _workload(
    s: Session,
    loop: list[_LoopStep],
    requests: Mapping[str, tuple[Request, int, Line]],
    aborts: list[Abort],
    planted: Mapping[str, Mapping[int, int]],
    proposals: Mapping[str, list[tuple[int, int]]],
) -> Workload:
    # Structured output: a grammar is ready at the step whose schedule() found it done (the capture's
    # `grammars`); one never found done stays compiling past the replay's last step.
    found = {
        rid: (i, compiled)
        for i, st in enumerate(loop)
        if st.schedule is not None
        for rid, compiled in st.schedule.data.get("grammars", {}).items()
    }
    reqs = tuple(
        WorkloadRequest(
            q,
            step,
            tuple(planted[rid].get(p, DEFAULT_FILLER_TOKEN_ID) for p in range(max(planted[rid], default=-1) + 1)),
            tuple(proposals[rid]),
            _grammar(found.get(rid), len(loop)) if q.structured_output else None,
        )
        for rid, (q, step, _) in requests.items()
    )
    lines = [line for _, _, line in requests.values()]
    try:
        return Workload(
            s.config,
            reqs,
            tuple(aborts),
            name=f"live-{s.id[:12]}",
            description=f"rebuilt from the live capture {s.header.path}, session {s.id}",
            max_steps=max(1, len(loop)),
            # The steps whose schedule() was called with throttle_prefills=True (a DP engine core's, or a test's).
            throttle_prefills=tuple(
                i for i, st in enumerate(loop) if st.schedule is not None and st.schedule.data.get("throttle_prefills")
            ),
            controls=tuple(_control(i, line) for i, st in enumerate(loop) for line in st.controls),
        )
    except SpecError as e:  # name the capture's line, not the rebuilt workload's index
        head, _, rest = e.where.partition("]")
        if head.startswith("workload.requests["):
            raise SpecError(
                lines[int(head[len("workload.requests[") :])].at("add.request" + rest), e.value, e.why
            ) from None
        raise SpecError(f"{s.header.path}: {e.where}", e.value, e.why) from None


def _record(
    i: int,
    st: _LoopStep,
    outputs: Mapping[int, SchedulerOutput],
    index_of: Mapping[int, int],
    loop: list[_LoopStep],
    s: Session,
    prompt: Mapping[str, int],
    truth: Any,
) -> StepRecord:
    """The captured step as a record: no state summary; sampled tokens from the update that absorbed it."""
    output = SchedulerOutput()
    sampled: dict[str, tuple[int, ...]] = {}
    pooled: frozenset[str] = frozenset()
    if st.schedule is not None:
        n = st.schedule.data["step"]
        output = _drafter_spelling(outputs[n], prompt, truth) if not s.config.async_scheduling else outputs[n]
        absorbed = next((x.update for x in loop if x.update is not None and x.update.data["of_step"] == n), None)
        if absorbed is not None:
            sampled = {rid: tuple(t) for rid, t in absorbed.data["sampled"].items() if t}
            pooled = frozenset(absorbed.data.get("pooler_output", ()))
    finished = {
        rid: _finished(f)
        for line in (*st.aborts, *st.mid_step_aborts)
        for rid, f in line.data.get("finished", {}).items()
    }
    if st.update is not None:
        finished.update({rid: _finished(f) for rid, f in st.update.data.get("finished", {}).items()})
    return StepRecord(
        i,
        tuple(line.data["request"]["request_id"] for line in st.adds),
        tuple(rid for line in st.aborts for rid in line.data["request_ids"]),
        output,
        ModelRunnerOutput(sampled, pooled),
        StateSummary(),
        finished,
        updated_step=None if st.update is None else index_of[st.update.data["of_step"]],
        draft_token_ids={}
        if st.drafts is None
        else {k: tuple(v) for k, v in st.drafts.data["draft_token_ids"].items()},
        scheduled=st.schedule is not None,
        aborted_mid_step=tuple(rid for line in st.mid_step_aborts for rid in line.data["request_ids"]),
        grammars=dict(st.schedule.data.get("grammars", {})) if st.schedule is not None else {},
        throttle_prefills=st.schedule is not None and bool(st.schedule.data.get("throttle_prefills")),
        controls=tuple(ControlCall.from_json(line.data["call"]) for line in st.controls),
    )


# The engine core's call a captured scheduler call stands for: a pause's mode is the state it set (`abort`'s aborts
# are captured as aborts), and its cache clear is captured as the reset it made.
_PAUSES = {"UNPAUSED": ("resume", "abort"), "PAUSED_NEW": ("pause", "wait"), "PAUSED_ALL": ("pause", "keep")}


def _control(step: int, line: Line) -> Control:
    """The workload's control for a captured scheduler call (`spec.controls`)."""
    call = ControlCall.from_json(line.data["call"])
    if call.call == "reset_prefix_cache":
        return Control(
            step, call.call, reset_running_requests=call.reset_running_requests, before_inputs=call.before_inputs
        )
    name, mode = _PAUSES[call.pause_state.name]
    return Control(step, name, mode=mode, clear_cache=False, before_inputs=call.before_inputs)


def _finished_as(line: Any, rid: str) -> RequestStatus:
    """The status an abort line's call finished `rid` with: FINISHED_ABORTED, or the status a caller finishing it
    from outside gave (`Abort.status`); an id it found finished already finished nothing."""
    f = line.data.get("finished", {}).get(rid)
    return RequestStatus[f["status"]] if f is not None else RequestStatus.FINISHED_ABORTED


def _added_before(requests: Mapping[str, tuple[Request, int, Line]], rid: str, step: int, line: Line) -> bool:
    """Whether `rid` was added before the abort `line` of loop step `step`."""
    if rid not in requests:
        return False
    _, added_at, add = requests[rid]
    return added_at < step or (add.path == line.path and add.lineno < line.lineno)


def _drains_before_update(s: Session, cur: _LoopStep) -> bool:
    """Whether an abort now lands between this step's schedule and its update (`Abort.mid_step`).

    Synchronously every schedule() is followed by its update in the same step, so an abort between them is
    mid-step. With a batch queue (async scheduling, pipeline parallel) only the next line tells (an update: mid-step; a schedule: the next
    step's), so `_loop_steps` places those when the update comes.
    """
    return cur.schedule is not None and cur.update is None and s.config.max_concurrent_batches == 1


def _finished(d: Mapping[str, Any]) -> FinishedRequest:
    return FinishedRequest(RequestStatus[d["status"]], tuple(d["output_token_ids"]))


def _drafter_spelling(out: SchedulerOutput, prompt: Mapping[str, int], truth: Any) -> SchedulerOutput:
    """Scheduled drafts as the spec's Drafter spells them: accepted ones are the true token, the rest true + 1."""
    if not out.scheduled_spec_decode_tokens:
        return out
    before = _computed_before(out)
    spelled = {}
    for rid, drafts in out.scheduled_spec_decode_tokens.items():
        if rid not in before or rid not in prompt or any(t < 0 for t in drafts):
            spelled[rid] = drafts  # placeholders (-1) and ids the checks below report stay as written
            continue
        pos = before[rid] + out.num_scheduled_tokens.get(rid, 0) - len(drafts) - prompt[rid]
        truths = [truth(rid, pos + j) for j in range(len(drafts))]
        accepted = _leading(drafts, truths)
        spelled[rid] = tuple(t if j < accepted else t + 1 for j, t in enumerate(truths))
    return replace(out, scheduled_spec_decode_tokens=spelled)


def _computed_before(out: SchedulerOutput) -> dict[str, int]:
    """Each scheduled request's num_computed_tokens before the step's advance (a new one's: its prefix hit)."""
    before = {r.req_id: r.num_computed_tokens for r in out.scheduled_new_reqs}
    before.update({r.req_id: r.num_computed_tokens for r in out.scheduled_cached_reqs})
    return before
