"""The decision invariants: every decision of a step is the one vLLM 0.33.0's rules make at its turn.

The catalogue (`catalogue.py`) states bounds: the budget is not overdrawn, a
chunk is at most the threshold, a victim's key is at least the others'. An
engine with one decision changed passes every bound while departing from
vLLM: a PRIORITY self-preemption that `break`s the pass, a grant cut by a
threshold that should not apply, a victim picked on the wrong tie, an
admission test that skips a head instead of stopping. These invariants
state the decisions themselves, over the state `schedule()` started from and
the step's record, so a monitor checks them on any engine's trace:

* `grant-exact`: each scheduled request gets exactly what the rules give it
  at its turn;
* `victims-exact`: the victims are exactly those the policy's rule picks,
  no more than it takes for the allocation to fit;
* `running-work-conserving`: a running request owed tokens and not
  scheduled is left out for a named reason;
* `admission-exact`: the admissions are the queue's prefix that passes the
  whole admission test, up to the first head that fails it;
* `prefix-hit-exact`: a hit is the longest run of cached blocks along the
  request's hashes, and each hit block is cached under its prefix's hash;
* `block-choice-exact`: every allocated block is the free queue's front;
* `stop-exact`: the update finishes a request exactly at check_stop's first
  verdict, with that status, and nothing else finishes but by an abort;
* `pooling-exact`: a pooling model's request finishes exactly when its
  pooled output is back;
* `rollback-exact`: C after the step is the grant's less the drafts the
  update rejected, and T grew by every returned token.

How: `decide` walks the step in vLLM's order (`step_walk.py`,
`decide_running.py`, `decide_waiting.py`, `decide_update.py`) against the
block pool and prefix cache rebuilt from the trace (`pool_shadow.py`),
using the rules of `spec/rules.py`, and keeps the first problem of each
invariant. `replay.TraceReplay` runs it at every step and puts the problems
in the view (`StepView.decision_problems`).

A decision is a walk over a step's turns, with a block pool and a cache of
hashes; the Z3 encoding (`proofs/`) abstracts the pool to counts and the
order of turns to one symbolic pass, so the walks are not dual-use, and
`catalogue.INVARIANTS` (what the CrossHair contracts take) does not list
them. Six of the eight have a twin stated on a view's rows for Z3
(`decision_rows.py`, proved by `schedspec prove --decisions`); the two
about block ids and hashes have none. A view built from states or
from Z3 terms has no problems (`decision_problems` is None), and every one
of them holds there. `MONITORED` is what the monitors run: the catalogue,
then these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..config import SchedulerConfig
from ..controls import ControlCall, PauseState
from ..request import Request, RequestStatus
from ..rules import (
    lora_counts_every_running,
    next_decode_eligible_step,
    pause_runs_waiting_pass,
    paused_token_budget,
    waiting_pass_allowed,
)
from ..trace import StepRecord
from .catalogue import INVARIANTS, Invariant
from .decide_running import walk_running_pass
from .decide_update import walk_update
from .decide_waiting import walk_waiting_pass
from .pool_shadow import PoolShadow
from .prefill_cadence import PrefillCadenceShadow
from .step_walk import (
    ADMISSION,
    BLOCK_CHOICE,
    CADENCE,
    CONTROLS,
    GRAMMAR,
    GRANT,
    LORA,
    POOLING,
    PREFILL,
    PREFIX_HIT,
    ROLLBACK,
    STOP,
    VICTIMS,
    WORK,
    StepWalk,
)
from .views import StepView


def decide(
    config: SchedulerConfig,
    requests: Mapping[str, Request],
    shadow: PoolShadow,
    view: StepView,
    rec: StepRecord,
    queues: tuple[tuple[str, ...], tuple[str, ...]],
    prefill_chunk: dict[str, bool],
    absorbed: StepRecord | None,
    in_flight: Mapping[str, int],
    last_preempted: Mapping[str, int],
    grammar_errors: set[str] | None = None,
    cadence: DecodeCadence | None = None,
    prefill: PrefillCadenceShadow | None = None,
    pause_state: PauseState = PauseState.UNPAUSED,
    reset_victims: tuple[str, ...] = (),
    dropping: set[str] | None = None,
    reset_unreported: tuple[str, ...] = (),
) -> dict[str, str]:
    """Walk one step (aborts, schedule(), update) through `shadow`; the first problem of each decision invariant.

    `queues` are running and waiting as schedule() found them, `prefill_chunk` is each request's
    `is_prefill_chunk` before it (updated here for the scheduled ones), `absorbed` the record whose output the
    update took, `in_flight` the tokens still in flight after it, `last_preempted` the step of each request's
    last preemption (this step's included), `grammar_errors` the failed grammars found by a schedule() and not
    yet finished by an update (carried between steps: under async an update may come later; updated here),
    `cadence` the schedule() count and each request's next decode-eligible call (async; updated here), `prefill`
    what the prefill cadence carries (`prefill_cadence.py`; updated here), `pause_state` the pause the step's
    controls left, `reset_victims` the requests a cache reset preempted before schedule() (the tail first),
    `dropping` the requests whose stale output is dropped, `reset_unreported` the victims the record's
    `preempted_req_ids` leaves out.
    """
    grammar_errors = grammar_errors if grammar_errors is not None else set()
    early = [c for c in rec.controls if c.before_inputs]  # a pending pause's clear: before the step's inputs
    problems = _controls(shadow, early, reset_victims)
    reset_victims = () if any(c.reset_running_requests for c in early) else reset_victims
    for rid in rec.aborted:  # finish_requests frees each in the order given, before schedule()
        shadow.forget(rid)
        prefill_chunk.pop(rid, None)
    cadence = cadence if cadence is not None else DecodeCadence()
    prefill = prefill if prefill is not None else PrefillCadenceShadow()
    if rec.scheduled:
        cadence.current_step += 1
    for rid in rec.aborted:
        cadence.eligible.pop(rid, None)
    prefill.forget(rec.aborted)
    w = StepWalk(config, requests, shadow, view, rec, queues, prefill_chunk, cadence.current_step, cadence.eligible)
    late = [c for c in rec.controls if not c.before_inputs]
    for detail in (*problems.values(), *_controls(shadow, late, reset_victims).values()):
        w.flag(CONTROLS, detail)
    if reset_unreported and rec.scheduled:
        unreported = ", ".join(reset_unreported)
        w.flag(CONTROLS, f"{unreported} preempted by reset_prefix_cache, but not in preempted_req_ids")
    w.pause_state = pause_state
    w.token_budget = paused_token_budget(pause_state, w.token_budget)
    w.dropping = dropping if dropping is not None else set()
    w.defer_prefills = prefill.defers(config, requests, rec, queues[0], prefill_chunk)
    if rec.scheduled:
        walk_running_pass(w)
        walk_waiting_pass(w)
        ran = bool(waiting_pass_allowed(len(rec.output.preempted_req_ids))) and bool(
            pause_runs_waiting_pass(pause_state, config.vllm_version)
        )
        admitted = sum(1 for n in rec.output.scheduled_new_reqs if n.req_id in queues[1])
        carried = w.prefill_scheduled or w.prefill_admitted
        prefill.after_passes(config, rec, w.defer_prefills, ran, len(queues[1]) - admitted, w.skipped, carried)
        for rid, n in rec.output.num_scheduled_tokens.items():  # Scheduler._update_after_schedule
            r = w.rows.get(rid)
            if r is not None:
                base = r.num_hit_tokens if r.admitted else r.pre_num_computed_tokens
                prefill_chunk[rid] = base + n < r.pre_num_tokens + r.pre_num_output_placeholders
                if config.async_scheduling and not prefill_chunk[rid]:  # AsyncScheduler._update_after_schedule
                    cadence.eligible[rid] = next_decode_eligible_step(cadence.current_step, config.decode_stagger)
    for rid in rec.aborted_mid_step:  # EngineCore's aborts queue, drained after the model ran, before the update
        shadow.forget(rid)
        prefill_chunk.pop(rid, None)
    walk_update(w, absorbed, in_flight, last_preempted)
    _grammar_waits(w, grammar_errors)
    _lora_limit(w)
    for rid in rec.finished:
        prefill_chunk.pop(rid, None)
        cadence.eligible.pop(rid, None)
    prefill.forget(rec.finished)
    return w.problems


def _controls(shadow: PoolShadow, calls: list[ControlCall], reset_victims: tuple[str, ...]) -> dict[str, str]:
    """The step's calls outside schedule() in order (`spec.controls`), through the shadow: the first reset with the
    running requests frees the victims' blocks, tail first; each reset empties the cache exactly when every block
    is free, and answers so (vllm/v1/core/sched/scheduler.py:Scheduler.reset_prefix_cache (3184-3227)). The first
    wrong answer, keyed by the invariant."""
    victims = list(reset_victims)
    found: dict[str, str] = {}
    for call in calls:
        if call.call != "reset_prefix_cache":
            continue
        if call.reset_running_requests:
            for rid in victims:
                shadow.free(rid)
            victims = []
        emptied = shadow.reset_cache()
        if call.result != emptied:
            held = sum(1 for n in shadow.refs.values() if n)
            found.setdefault(
                CONTROLS,
                f"reset_prefix_cache(reset_running_requests={call.reset_running_requests}) answers {call.result}, "
                f"but {'every block is free' if emptied else f'{held} blocks are held'}, so it "
                f"{'empties' if emptied else 'cannot empty'} the cache",
            )
    return found


@dataclass
class DecodeCadence:
    """What the PP decode cadence carries between steps: vLLM's `current_step` (schedule() calls so far) and
    each live request's `next_decode_eligible_step` that is not 0 (only async scheduling sets one)."""

    current_step: int = 0
    eligible: dict[str, int] = field(default_factory=dict)


def _lora_limit(w: StepWalk) -> None:
    """vLLM asserts it before every waiting pass (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1047)): the
    running requests hold at most max_loras adapters (before 0.33.0: those this step scheduled)."""
    limit = w.config.max_loras
    if limit is None:
        return
    running = [rid for rid in w.rec.state.running if rid in w.requests]
    if not lora_counts_every_running(w.config.vllm_version):
        running = [rid for rid in running if rid in w.rec.output.num_scheduled_tokens]
    adapters = sorted({w.requests[rid].lora_int_id for rid in running if w.requests[rid].lora_int_id > 0})
    if len(adapters) > limit:
        w.flag(LORA, f"the running requests hold {len(adapters)} adapters {adapters}, max_loras is {limit}")


def _grammar_waits(w: StepWalk, grammar_errors: set[str]) -> None:
    """The grammar wait's two outcomes (vllm/v1/core/sched/scheduler.py:Scheduler._handle_blocked_waiting_request
    and Scheduler.update_from_output): a request the pass reached with its grammar compiled leaves
    WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR, one the pass did not reach keeps it; the failed grammars the pass
    reached are finished with FINISHED_ERROR by the next update, and nothing else finishes so."""
    rec = w.rec
    for rid in sorted(w.reached):
        r, after = w.rows[rid], rec.state.requests.get(rid)
        if (
            after is not None
            and not r.pre_blocked
            and after.status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
        ):
            w.flag(GRAMMAR, f"{rid}'s grammar has compiled and the pass reached it, yet it still waits for its grammar")
    for rid, r in w.rows.items():
        after = rec.state.requests.get(rid)
        if r.pre_grammar_wait and r.pre_waiting and rid not in w.reached and after is not None:
            if after.status != RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR:
                w.flag(
                    GRAMMAR,
                    f"{rid} leaves its grammar wait ({after.status.name}) in a step whose pass never reached it",
                )
    grammar_errors.update(w.grammar_errors_found)
    errors = {rid: f for rid, f in rec.finished.items() if f.status == RequestStatus.FINISHED_ERROR}
    if rec.updated_step is None:  # no update in this step: the errors wait for the next one
        for rid in sorted(errors):
            w.flag(GRAMMAR, f"{rid} finishes as FINISHED_ERROR in a step with no update")
        return
    for rid in sorted(errors):
        if rid not in grammar_errors:
            w.flag(GRAMMAR, f"{rid} finishes as FINISHED_ERROR, but no pass found its grammar failed")
    for rid in sorted(grammar_errors):
        if rid not in errors and rid in rec.state.requests:
            w.flag(GRAMMAR, f"the pass found {rid}'s grammar failed, yet the update leaves it live")
    grammar_errors.clear()


def _problem(v: StepView, name: str) -> str:
    return dict(v.decision_problems or ()).get(name, "")


def decision_detail(name: str, v: StepView) -> str:
    """The walk's account of the first wrong decision, for a violation's detail."""
    return _problem(v, name)


def grant_exact(v: StepView) -> bool:
    """Monitor-only (a walk over the step's turns). Running: `running_num_new_tokens` of the owed tokens with the
    step's threshold, the budget left at its turn and the position bound, and the drafts the clamps leave.
    Admitted: `waiting_num_new_tokens` (or the padding), cut to the budget left."""
    return not _problem(v, GRANT)


def victims_exact(v: StepView) -> bool:
    """Monitor-only. The victims, turn by turn: FCFS the tail, PRIORITY the first maximum of (priority, arrival),
    each only while the allocation at that turn does not fit."""
    return not _problem(v, VICTIMS)


def running_work_conserving(v: StepView) -> bool:
    """Monitor-only. Every running request the pass reaches, owed tokens and given blocks, is scheduled or a victim."""
    return not _problem(v, WORK)


def admission_exact(v: StepView) -> bool:
    """Monitor-only. Admissions are the queue's prefix that passes the whole test, up to the first head that fails."""
    return not _problem(v, ADMISSION)


def prefix_hit_exact(v: StepView) -> bool:
    """Monitor-only (reads the prefix cache rebuilt from the trace). The hit is the longest cached run of the
    request's block hashes, capped at (T - 1) // bs blocks, and each hit block is cached under its own hash."""
    return not _problem(v, PREFIX_HIT)


def block_choice_exact(v: StepView) -> bool:
    """Monitor-only (reads the free queue rebuilt from the trace). New blocks come off the free queue's front,
    and a hit takes the first block cached under each hash."""
    return not _problem(v, BLOCK_CHOICE)


def grammar_wait_exact(v: StepView) -> bool:
    """Monitor-only. A request waiting for its grammar is passed over until it compiles, leaves the wait when a
    pass reaches it compiled, and, if the compile failed, is finished with FINISHED_ERROR by the next update."""
    return not _problem(v, GRAMMAR)


def lora_limit_exact(v: StepView) -> bool:
    """Monitor-only. The waiting pass passes over a request whose adapter would make max_loras + 1 among the
    running ones, and the running requests never hold more than max_loras adapters."""
    return not _problem(v, LORA)


def decode_cadence_exact(v: StepView) -> bool:
    """Monitor-only. Under async scheduling with pipeline parallel, a running request that decoded in schedule()
    call s is not scheduled again before call s + pp_size (the work-conserving invariant holds it to that call)."""
    return not _problem(v, CADENCE)


def prefill_cadence_exact(v: StepView) -> bool:
    """Monitor-only. A step that defers prefills (its DP engine core throttles it, or from 0.33.0 the local
    interval has not passed, while a decode runs and the queue drained) schedules no prompt chunk and admits no
    request with prompt left to compute."""
    return not _problem(v, PREFILL)


def controls_exact(v: StepView) -> bool:
    """Monitor-only. The scheduler's calls outside schedule(): a cache reset empties the cache exactly when every
    block is free (after preempting the running requests, if asked) and answers so; its victims are reported by the
    next schedule(); PAUSED_NEW admits nothing from the waiting queue, and PAUSED_ALL schedules nothing."""
    return not _problem(v, CONTROLS)


def pooling_exact(v: StepView) -> bool:
    """Monitor-only. A pooling model's request finishes FINISHED_STOPPED, with no outputs, exactly in the update that
    brings its pooled output back; no other update finishes it."""
    return not _problem(v, POOLING)


def rollback_exact(v: StepView) -> bool:
    """Monitor-only. C after the step is the schedule's (the hit or 0 on admission or preemption, plus the grant) less
    the drafts the absorbed output rejected, and T grew by every returned token."""
    return not _problem(v, ROLLBACK)


def stop_exact(v: StepView) -> bool:
    """Monitor-only. A request finishes in the update exactly at check_stop's first verdict on its returned tokens,
    with that status and the tokens after it trimmed; nothing else finishes but by an abort."""
    return not _problem(v, STOP)


S = "vllm/v1/core/sched/scheduler.py:Scheduler.schedule"
DECISIONS: tuple[Invariant, ...] = (
    Invariant(
        VICTIMS,
        "The victims are exactly those the policy's rule picks at the turns whose allocation does not fit (FCFS the "
        "tail of running, PRIORITY the first maximum of (priority, arrival)), one at a time until it fits.",
        f"{S} (910-980)",
        ("§4", "§9.A.7", "§9.A.8", "VICTIM", "DECISION"),
        victims_exact,
    ),
    Invariant(
        WORK,
        "A running request the pass reaches with tokens owed and blocks to give is scheduled or preempted, in "
        "every step, including steps that preempted: it is left out only when the budget ran out, the async skip "
        "rule or a zero grant passes it over, or the pass ended at a self-preemption.",
        f"{S} (793-1037)",
        ("§3.1", "§9.B", "PROGRESS", "DECISION"),
        running_work_conserving,
    ),
    Invariant(
        GRANT,
        "Each scheduled request gets exactly what the rules give it at its turn: its owed tokens, clamped by the "
        "step's threshold, the budget left in pass order and the position bound (running), or T minus the hit "
        "(or the spec padding), clamped by the threshold and the budget left (admitted); with the drafts the "
        "clamps leave.",
        f"{S} (754-769, 839-857, 1010-1025, 1306-1346)",
        ("§3.1", "§3.2", "§9.A.4", "DECISION"),
        grant_exact,
    ),
    Invariant(
        ADMISSION,
        "The admissions are exactly the waiting queue's prefix that passes the whole admission test at its turn "
        "(budget, max_num_active_seqs, spec padding, chunked prefill, the full-sequence gate, the blocks and the "
        "watermark), less the requests with stale output in flight; the pass stops at the first head that fails.",
        f"{S} (1049-1616); vllm/v1/core/kv_cache_manager.py:KVCacheManager.allocate_slots (518-588)",
        ("§3.2", "§9.A.5", "§9.A.17", "DECISION"),
        admission_exact,
    ),
    Invariant(
        PREFIX_HIT,
        "An admission's prefix hit is the longest run of its block hashes cached at its turn, at most (T - 1) // bs "
        "blocks, and each hit block is cached under its own prefix's hash.",
        "vllm/v1/core/kv_cache_manager.py:KVCacheManager.get_computed_blocks; "
        "vllm/v1/core/single_type_kv_cache_manager.py:SingleTypeKVCacheManager.cache_blocks",
        ("§3.4", "§9.A.3", "PREFIX", "DECISION"),
        prefix_hit_exact,
    ),
    Invariant(
        BLOCK_CHOICE,
        "Every newly allocated block is the front of the free queue, where freed blocks go tail first, unhashed to "
        "the front and hashed to the back; a hit takes the first block cached under each hash.",
        "vllm/v1/core/block_pool.py:BlockPool.get_new_blocks; vllm/v1/core/block_pool.py:BlockPool.free_blocks; "
        "vllm/v1/core/kv_cache_manager.py:KVCacheManager.free",
        ("§3.4", "§9.A.16", "DECISION"),
        block_choice_exact,
    ),
    Invariant(
        STOP,
        "The update finishes a request exactly at check_stop's first verdict on its returned tokens, with that "
        "status (EOS or stop token: stopped; a length cap: length-capped) and the tokens after it trimmed; a request "
        "no verdict stops stays live, and nothing finishes but by a verdict or an abort.",
        "vllm/v1/core/sched/scheduler.py:Scheduler._update_request_with_output; vllm/v1/core/sched/utils.py:check_stop",
        ("§5", "§9.A.11", "§9.A.12", "STOP", "DECISION"),
        stop_exact,
    ),
    Invariant(
        ROLLBACK,
        "After the step a live request's num_computed_tokens is where schedule() left it (its C, 0 after a "
        "preemption or its prefix hit on admission, plus its grant) less the drafts the absorbed output rejected "
        "(none when the output is stale, the row empty or C is 0), and its num_tokens grew by every returned token.",
        "vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output (2349-2364); "
        "vllm/v1/core/sched/scheduler.py:Scheduler._update_after_schedule (1855-1859)",
        ("§5", "§9.A.13", "SPEC", "DECISION"),
        rollback_exact,
    ),
    Invariant(
        GRAMMAR,
        "A request waiting for its grammar (structured output) is passed over by the waiting pass until its "
        "grammar has compiled, and leaves the wait when a pass reaches it compiled; if the compile failed, the "
        "pass notes it and the next update finishes it with FINISHED_ERROR; nothing else finishes so.",
        "vllm/v1/core/sched/scheduler.py:Scheduler._handle_blocked_waiting_request; "
        "vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output",
        ("GRAMMAR", "DECISION"),
        grammar_wait_exact,
    ),
    Invariant(
        LORA,
        "LoRA: a waiting request whose adapter no running request uses is passed over while max_loras adapters "
        "run (it keeps its place), and the running requests never hold more than max_loras adapters.",
        f"{S} (1038-1101, 1564-1565)",
        ("LORA", "DECISION"),
        lora_limit_exact,
    ),
    Invariant(
        CADENCE,
        "Pipeline parallel under async scheduling: a running request that decoded (was scheduled and not left "
        "mid-prefill) in schedule() call s is passed over until call s + pp_size, so each PP stage holds at most "
        "one of its decodes; a request owed tokens past that call is scheduled as any other.",
        f"{S} (816-820); vllm/v1/core/sched/async_scheduler.py:AsyncScheduler._update_after_schedule (51-56)",
        ("PP", "DECISION"),
        decode_cadence_exact,
    ),
    Invariant(
        PREFILL,
        "The prefill cadence: a step whose DP engine core throttles it, or (from 0.33.0, outside data parallel) "
        "fewer than prefill_schedule_interval executed steps after the last prefill, while a decode runs and the "
        "last releasing step drained the queue, schedules no prompt chunk and admits no request with prompt to "
        "compute; the waiting pass ends at the first such request.",
        f"{S} (750-791, 820-824, 1290-1293, 1612-1629)",
        ("CADENCE", "DECISION"),
        prefill_cadence_exact,
    ),
    Invariant(
        CONTROLS,
        "The engine's calls outside schedule(): reset_prefix_cache answers whether it emptied the cache, which it "
        "does exactly when every block is free (with reset_running_requests, after preempting every running "
        "request from the tail, their in-flight output dropped), and the next schedule() reports its victims in "
        "preempted_req_ids; under PAUSED_NEW the waiting pass admits nothing from the waiting queue, and under "
        "PAUSED_ALL nothing is scheduled.",
        f"{S} (723-725, 1050-1067); vllm/v1/core/sched/scheduler.py:Scheduler.reset_prefix_cache (3184-3227)",
        ("CONTROLS", "DECISION"),
        controls_exact,
    ),
    Invariant(
        POOLING,
        "A pooling model samples nothing: a request finishes FINISHED_STOPPED, with no outputs, exactly in the update "
        "that brings back its pooled output (the step whose tokens ended at its prompt's end), stale or not; no other "
        "update finishes it.",
        "vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output (2395, 2416-2419); "
        "vllm/v1/pool/metadata.py:PoolingCursor",
        ("POOLING", "DECISION"),
        pooling_exact,
    ),
)

MONITORED: tuple[Invariant, ...] = INVARIANTS + DECISIONS
MONITORED_BY_NAME = {inv.name: inv for inv in MONITORED}
DECISION_NAMES = frozenset(inv.name for inv in DECISIONS)
