"""Views from a trace: what the summary leaves out, rebuilt from the step records.

A trace holds what every engine can expose: per step the arrivals and
aborts, the `SchedulerOutput`, the model's answer and a state summary (the
queues, the free-block count, and each request's status, C and T). The
invariants read more than that, so `TraceReplay` rebuilds it, step by step,
from the records alone, never from an engine:

* the state `schedule()` started from: the previous step's summary with this
  step's arrivals added (behind everyone under FCFS, in `Request.__lt__`
  order under PRIORITY) and its aborts removed;
* each request's block table, from the block ids in the outputs (new
  requests list all their blocks, running ones only the new ones,
  preemption and finishing free them all). Under prefix caching a new
  request's first `num_computed_tokens // block_size` blocks are its prefix
  hit and may be held by others too; every other block an engine hands out
  must be one nobody holds. Free counts and conservation count distinct
  blocks, because a shared block is one block;
* the drafts S: emptied when a request is scheduled or preempted; set from
  the step's `draft_token_ids` (sync spec decode, proposed after the
  update), or, under async scheduling, to the k placeholder drafts of
  every scheduled request that sampled (`AsyncScheduler._update_after_schedule`);
* the async counters, from the steps still in flight after this one
  (`StepRecord.in_flight`): a scheduled step adds its tokens to
  `num_in_flight_tokens` until its output is absorbed; if it sampled (it
  was not a partial prefill chunk) it adds 1 + its drafts to the
  placeholders P (a pooling model's: none from 0.32.0, 1 before), which its output takes back exactly (rejected drafts,
  then every returned token), unless the request was preempted meanwhile:
  preemption zeroes P and turns what is in flight into stale output. In a
  synchronous trace nothing is in flight after a step, so all three are 0.

The state after an async step is the state after this step's schedule()
and an update with an older step's output (`updated_step`), so the tokens
that step sampled, not this step's, are what may have stopped a request.

Beside the view, the replay walks every step's decisions in vLLM's order
(`decisions.decide`) against the block pool and prefix cache it rebuilds
from the same records (`pool_shadow.PoolShadow`), and puts the first wrong
decision of each decision invariant in the view (`decision_problems`).

Rebuilding needs every record, and at 1,000 running requests it costs a few
times what vLLM's own step does. A live monitor that judges one step in N
(`live/online.py`) therefore `skip`s the records it does not judge (keeping
only what the steps in flight need: the records and the last preemptions)
and, before each step it judges, `reseed`s the block tables, drafts,
`is_prefill_chunk` flags and pool from the engine's own state
(`ReplaySeed`), read as the previous record closed. The step itself is then
judged exactly as in a full replay; `tests/unit/spec/test_replay_reseed.py` pins
that a reseeded replay's views equal the full replay's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence

from ..controls import PauseState, pause_state_after
from ..output import ModelRunnerOutput
from ..request import GRAMMAR_COMPILED, GRAMMAR_COMPILING, GRAMMAR_FAILED, RequestStatus
from ..rules import decode_cadence_waits, heap_key, pause_admits_waiting, paused_token_budget
from ..trace import StateSummary, StepRecord, Trace
from ..versions import holds
from .build import Blocks, Counts, arrival_ranks, ids_problem, make_view, shared_refs
from .decisions import DecodeCadence, decide
from .pool_shadow import PoolShadow
from .prefill_cadence import PrefillCadenceShadow
from .views import StepView


@dataclasses.dataclass(frozen=True)
class ReplaySeed:
    """An engine's state between two steps, beyond the summary: what `reseed` takes instead of every earlier record.

    `hash_source` gives each request's prefix-cache keys, the same keys `cached` is keyed by.
    """

    blocks: Mapping[str, tuple[int, ...]]  # each request's block table
    drafts: Mapping[str, int]  # S: draft (or placeholder) tokens held
    prefill_chunk: Mapping[str, bool]  # is_prefill_chunk
    free_queue: Sequence[int]  # front first
    cached: Mapping[Hashable, Sequence[int]]  # hash -> its blocks, first registered first
    num_cached: Mapping[str, int]  # leading blocks of each table registered in the cache
    hash_source: Callable[[str], Sequence[Hashable]]
    # next_decode_eligible_step of each request that has one (async with PP; vLLM's counter is the replay's own)
    decode_eligible: Mapping[str, int] = dataclasses.field(default_factory=dict)
    # The prefill cadence's state (`prefill_cadence.py`): the capacity flag, the deferred waiting requests, the
    # executed steps and the last prefill-carrying one (None: never, one interval back).
    prefill_capacity_bound: bool = False
    deferred_waiting: frozenset[str] = frozenset()
    num_executed_steps: int = 0
    last_prefill_step: int | None = None
    # The engine's calls outside schedule() (`spec.controls`): the pause state, and the requests whose stale output
    # is dropped (vLLM's `drop_stale_output`, set by reset_prefix_cache's preemptions)
    pause_state: int = 0
    dropping: frozenset[str] = frozenset()


def reset_victims(running: tuple[str, ...], rec: StepRecord) -> tuple[str, ...]:
    """The requests a `reset_prefix_cache(reset_running_requests=True)` preempted before this step's schedule(),
    `running` being the last step's, in the order it preempted them: the tail first
    (vllm/v1/core/sched/scheduler.py:Scheduler.reset_prefix_cache (3184-3210)). The step's aborts came before it,
    unless it came before them (`before_inputs`: a pending pause's clear, or a control so placed)."""
    resets = [c for c in rec.controls if c.call == "reset_prefix_cache" and c.reset_running_requests]
    if not resets:
        return ()
    gone = set() if resets[0].before_inputs else set(rec.aborted)
    return tuple(reversed([rid for rid in running if rid not in gone]))


class TraceReplay:
    """Fed the records in order (`step`); reads only `trace.workload`, so a `StreamedTrace` serves as well.

    Between steps it holds per live request (block tables, drafts, async counters), the records still in
    flight, and per request of the workload its arrival rank and last preemption: nothing per step.
    """

    def __init__(self, trace: Trace) -> None:
        self.config = trace.workload.config
        self.requests = {r.request_id: r.request for r in trace.workload.requests}
        self.ranks = arrival_ranks(self.requests)
        self.last = StateSummary(num_free_blocks=self.config.num_usable_blocks)
        self.blocks: dict[str, tuple[int, ...]] = {}
        self.spec: dict[str, int] = {}  # S per live request after the last step
        self.counters: dict[str, tuple[int, int, int]] = {}  # (P, in flight, stale) after the last step
        self.records: dict[int, StepRecord] = {}
        self.last_preempted: dict[str, int] = {}
        # Structured output: the failed grammars a schedule() found that no update has finished yet
        # (vLLM's `grammar_compile_error_reqs`): under async an update can come a step later.
        self.grammar_errors: set[str] = set()
        # The decision walk's own state: the pool and cache, and is_prefill_chunk per live request.
        self.shadow = PoolShadow(self.config, self.requests)
        self.prefill_chunk: dict[str, bool] = {}
        self.cadence = DecodeCadence()  # schedule() calls so far, each request's next decode-eligible call
        self.prefill = PrefillCadenceShadow()  # the prefill cadence's carried state (`prefill_cadence.py`)
        self.pause_state = PauseState.UNPAUSED  # as the records' controls set it (`spec.controls`)
        self.dropping: set[str] = set()  # preempted by a cache reset, their stale output dropped, not delivered
        self.reset_pending: set[str] = set()  # preempted by a cache reset, not yet reported by a schedule()
        self.dropped_in_update: set[str] = set()  # `dropping` as the last step's update found it
        self.in_flight: tuple[int, ...] = ()  # the last record's steps in flight, for `reseed`
        self.stale = False  # a record was skipped: `step` needs a `reseed` first

    def _holders(self) -> dict[int, int]:
        holders: dict[int, int] = {}
        for blocks in self.blocks.values():
            for b in blocks:
                holders[b] = holders.get(b, 0) + 1
        return holders

    def _arrive(self, waiting: tuple[str, ...], added: tuple[str, ...], num_skipped: int) -> tuple[str, ...]:
        if self.config.policy == "fcfs":
            if not holds("one-waiting-queue", self.config.vllm_version):
                # Before 0.31.0 a request that arrives blocked (a grammar to wait for) joins the skipped queue,
                # which the pass walks first (reference_impl/request_queue.py:SkippedFirstQueue).
                blocked = tuple(rid for rid in added if self.requests[rid].structured_output)
                rest = tuple(rid for rid in added if not self.requests[rid].structured_output)
                return waiting[:num_skipped] + blocked + waiting[num_skipped:] + rest
            return waiting + added
        rq = self.requests
        return tuple(sorted(waiting + added, key=lambda rid: heap_key(rq[rid].priority, rq[rid].arrival_time, rid)))

    def _counts(self, summary: StateSummary, rid: str) -> Counts:
        r = summary.requests[rid]
        p, in_flight, stale = self.counters.get(rid, (0, 0, 0))
        return Counts(
            r.status,
            r.num_computed_tokens,
            r.num_tokens,
            len(self.blocks.get(rid, ())),
            self.spec.get(rid, 0),
            p,
            in_flight,
            stale,
            r.grammar,
        )

    def reset_victims(self, rec: StepRecord) -> tuple[str, ...]:
        return reset_victims(self.last.running, rec)

    def before(self, rec: StepRecord) -> StateSummary:
        """The last summary with this step's controls applied: a cache reset's victims PREEMPTED with C = 0, at the
        head of the waiting queue in their running order (FCFS), or in heap order (PRIORITY)."""
        victims = self.reset_victims(rec)
        last = self.last
        if not victims:
            return last
        requests = dict(last.requests)
        for rid in victims:
            requests[rid] = dataclasses.replace(requests[rid], status=RequestStatus.PREEMPTED, num_computed_tokens=0)
        ordered = tuple(reversed(victims))
        if self.config.policy == "fcfs":
            skipped = last.num_skipped_waiting  # before 0.31.0 a preempted request goes behind the skipped queue
            waiting = last.waiting[:skipped] + ordered + last.waiting[skipped:]
        else:
            rq = self.requests
            key = lambda rid: heap_key(rq[rid].priority, rq[rid].arrival_time, rid)  # noqa: E731
            waiting = tuple(sorted(last.waiting + ordered, key=key))
        running = tuple(rid for rid in last.running if rid not in victims)
        return dataclasses.replace(last, running=running, waiting=waiting, requests=requests)

    def _in_step(self, rec: StepRecord, victims: tuple[str, ...]) -> StepRecord:
        """The record as its schedule() decided it: the cache reset's victims out of `preempted_req_ids` (the
        engine reports them there, `controls-exact` checks that it does; every other check sees its own)."""
        if not victims:
            return rec
        out = dataclasses.replace(rec.output, preempted_req_ids=rec.output.preempted_req_ids - set(victims))
        return dataclasses.replace(rec, output=out)

    def skip(self, rec: StepRecord) -> None:
        """A record not judged: kept while in flight, its preemptions noted; the tables are stale until `reseed`."""
        self.pause_state = pause_state_after(self.pause_state, rec.controls)
        self.reset_pending = set() if rec.scheduled else self.reset_pending | set(self.reset_victims(rec))
        self.records[rec.step] = rec
        for rid in rec.output.preempted_req_ids:
            self.last_preempted[rid] = rec.step
        self.cadence.current_step += rec.scheduled
        self.in_flight = rec.in_flight
        self.stale = True
        self.last = rec.state
        self._forget(rec)

    def reseed(self, seed: ReplaySeed) -> None:
        """Take the engine's state as the previous record closed (`skip` has seen that record)."""
        self.blocks = {rid: tuple(t) for rid, t in seed.blocks.items() if t}
        self.spec = {rid: n for rid, n in seed.drafts.items() if n}
        self.prefill_chunk = {rid: True for rid, chunk in seed.prefill_chunk.items() if chunk}
        self.cadence.eligible = {rid: n for rid, n in seed.decode_eligible.items() if n}
        self.prefill.capacity_bound = seed.prefill_capacity_bound
        self.prefill.deferred = set(seed.deferred_waiting)
        self.prefill.num_executed_steps = seed.num_executed_steps
        self.prefill.last_prefill_step = seed.last_prefill_step
        self.pause_state = PauseState(seed.pause_state)
        self.dropping = set(seed.dropping)
        self.shadow = PoolShadow.seeded(
            self.config, self.requests, seed.hash_source, seed.free_queue, seed.blocks, seed.cached, seed.num_cached
        )
        self._counters(self.in_flight)
        self.stale = False

    def step(self, rec: StepRecord) -> StepView:
        if self.stale:
            raise RuntimeError(f"record {rec.step}: the replay skipped a record and was not reseeded")
        config = self.config
        victims = self.reset_victims(rec)
        last = self.before(rec)
        self.records[rec.step] = rec
        # A reset's victims are reported by the next schedule(), which may come steps later while paused.
        self.reset_pending.update(victims)
        unreported: tuple[str, ...] = ()
        if rec.scheduled:
            pending = tuple(sorted(self.reset_pending))
            unreported = tuple(rid for rid in pending if rid not in rec.output.preempted_req_ids)
            rec = self._in_step(rec, pending)
            self.reset_pending = set()
        pause_state = self.pause_state = pause_state_after(self.pause_state, rec.controls)
        held_before = len(self._holders())
        for rid in victims:  # _preempt_request: no blocks, drafts or placeholders; what is in flight turns stale
            self.blocks.pop(rid, None)
            _, in_flight_tokens, _ = self.counters.get(rid, (0, 0, 0))
            self.counters[rid] = (0, in_flight_tokens, in_flight_tokens)
            self.spec[rid] = 0
            self.last_preempted[rid] = rec.step
            if in_flight_tokens:
                self.dropping.add(rid)
        self.dropped_in_update = set(self.dropping)
        gone = set(rec.aborted)
        added = tuple(rid for rid in rec.added if rid not in gone)
        pre = {rid: self._counts(last, rid) for rid in last.requests if rid not in gone}
        for rid in added:
            q = self.requests[rid]
            status = (
                RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR if q.structured_output else RequestStatus.WAITING
            )
            pre[rid] = Counts(
                status, 0, q.num_prompt_tokens, 0, grammar=GRAMMAR_COMPILING if q.structured_output else None
            )
        for rid, compiled in rec.grammars.items():  # compiles that finished before this schedule()
            if rid in pre and pre[rid].grammar == GRAMMAR_COMPILING:
                pre[rid] = dataclasses.replace(pre[rid], grammar=GRAMMAR_COMPILED if compiled else GRAMMAR_FAILED)
        skipped_before = last.waiting[: last.num_skipped_waiting]
        pre_queues = (
            tuple(r for r in last.running if r not in gone),
            self._arrive(
                tuple(r for r in last.waiting if r not in gone),
                added,
                sum(1 for r in skipped_before if r not in gone),
            ),
        )
        # Aborted requests free their blocks before schedule(), and a cache reset's victims theirs; a shared block
        # stays held by the others.
        for rid in rec.aborted:
            self.blocks.pop(rid, None)
        pre_free = last.num_free_blocks + held_before - len(self._holders())
        # Victims free their blocks during schedule(), before later requests allocate; finishing frees after it.
        for rid in rec.output.preempted_req_ids:
            self.blocks.pop(rid, None)
            self.last_preempted[rid] = rec.step
        problem = self._allocate(rec)
        for rid in rec.finished:
            self.blocks.pop(rid, None)
        self._drafts_and_counters(rec)
        post = {rid: self._counts(rec.state, rid) for rid in rec.state.requests}
        problem = problem or ids_problem(self.blocks, None, config.num_gpu_blocks, config.enable_prefix_caching)
        absorbed = self.records.get(rec.updated_step) if rec.updated_step is not None else None
        calls = self.cadence.current_step + rec.scheduled  # this schedule()'s number
        waits = frozenset(rid for rid, n in self.cadence.eligible.items() if decode_cadence_waits(calls, n))
        view = make_view(
            config,
            self.requests,
            pre,
            post,
            pre_queues,
            (rec.state.running, rec.state.waiting),
            rec.output,
            pre_free,
            rec.state.num_free_blocks,
            Blocks(problem, shared_refs(self.blocks)),
            self._delivered(absorbed),
            rec.finished,
            self.ranks,
            rec.state.num_skipped_waiting,
            waits,
            frozenset(rid for rid, chunk in self.prefill_chunk.items() if chunk),
            frozenset(rec.aborted_mid_step),
        )
        in_flight: dict[str, int] = {}
        for s in rec.in_flight:
            old = self.records.get(s)
            for rid, n in old.output.num_scheduled_tokens.items() if old is not None else ():
                in_flight[rid] = in_flight.get(rid, 0) + n
        problems = decide(
            config,
            self.requests,
            self.shadow,
            view,
            rec,
            pre_queues,
            self.prefill_chunk,
            absorbed,
            in_flight,
            self.last_preempted,
            self.grammar_errors,
            self.cadence,
            self.prefill,
            pause_state,
            victims,
            self.dropped_in_update,
            unreported,
        )
        view = dataclasses.replace(
            view,
            decision_problems=tuple(problems.items()),
            prefills_deferred=self.prefill.deferring,
            token_budget=paused_token_budget(pause_state, view.token_budget),  # PAUSED_ALL: nothing may run
            admits_waiting=bool(pause_admits_waiting(pause_state)),
        )
        self.last = rec.state
        self._forget(rec)
        return view

    def _delivered(self, absorbed: StepRecord | None) -> ModelRunnerOutput | None:
        """The absorbed step's model output as the update takes it: a cache reset's victims' stale output dropped
        (vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output, `drop_stale_output`)."""
        if absorbed is None:
            return None
        dropped = {rid for rid in self.dropped_in_update if absorbed.step < self.last_preempted.get(rid, -1)} & set(
            absorbed.model_output.sampled_token_ids
        )
        if not dropped:
            return absorbed.model_output
        kept = {rid: t for rid, t in absorbed.model_output.sampled_token_ids.items() if rid not in dropped}
        return ModelRunnerOutput(kept, absorbed.model_output.pooler_output - dropped)

    def _allocate(self, rec: StepRecord) -> str:
        """Replay this step's allocations into the block tables; the first block handed out that someone holds."""
        bs, caching = self.config.block_size, self.config.enable_prefix_caching
        holders = self._holders()
        problem = ""
        for n in rec.output.scheduled_new_reqs:
            hit = n.num_computed_tokens // bs if caching else 0
            for b in n.block_ids[hit:]:
                if holders.get(b) and not problem:
                    problem = f"block {b} is given to {n.req_id} while another request holds it"
            self.blocks[n.req_id] = tuple(n.block_ids)
        for c in rec.output.scheduled_cached_reqs:
            for b in c.new_block_ids or ():
                if holders.get(b) and not problem:
                    problem = f"block {b} is given to {c.req_id} while another request holds it"
            self.blocks[c.req_id] = self.blocks.get(c.req_id, ()) + tuple(c.new_block_ids or ())
        return problem

    def _drafts_and_counters(self, rec: StepRecord) -> None:
        out, k = rec.output, self.config.num_speculative_tokens
        touched = set(out.num_scheduled_tokens) | set(out.preempted_req_ids)
        for rid in touched:
            self.spec[rid] = 0
        if self.config.async_scheduling:
            for rid in out.num_scheduled_tokens:
                if rec.model_output.sampled_token_ids.get(rid):
                    self.spec[rid] = k
        for rid, drafts in rec.draft_token_ids.items():
            self.spec[rid] = len(drafts)
        self._counters(rec.in_flight)
        self.dropping = {rid for rid in self.dropping if self.counters.get(rid, (0, 0, 0))[2] > 0}

    def _counters(self, steps_in_flight: tuple[int, ...]) -> None:
        self.counters = {}
        sampled = self.config.num_sampled_tokens_per_step
        for s in steps_in_flight:
            old = self.records.get(s)
            if old is None:  # names no step seen: the consistency check reports it (trace-in-flight)
                continue
            for rid, n in old.output.num_scheduled_tokens.items():
                p, in_flight, stale = self.counters.get(rid, (0, 0, 0))
                if s < self.last_preempted.get(rid, -1):
                    stale += n
                elif self.config.async_scheduling and (
                    old.model_output.sampled_token_ids.get(rid) or rid in old.model_output.pooler_output
                ):  # not a partial prefill chunk: it sampled, or (a pooling model) pooled
                    p += sampled + len(old.output.scheduled_spec_decode_tokens.get(rid, ()))
                self.counters[rid] = (p, in_flight + n, stale)

    def _forget(self, rec: StepRecord) -> None:
        """Keep only the records still in flight, and the drafts of live requests."""
        keep = set(rec.in_flight)
        self.records = {s: r for s, r in self.records.items() if s in keep}
        live = set(rec.state.requests)
        self.spec = {rid: n for rid, n in self.spec.items() if rid in live}


def views_from_trace(trace: Trace) -> Iterator[StepView]:
    replay = TraceReplay(trace)
    for rec in trace.steps:
        yield replay.step(rec)
