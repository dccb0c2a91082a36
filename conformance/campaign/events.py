"""Pass-level events, detected in a trace's step records: what the coverage map counts.

Every detector reads only what a trace holds (the records of any engine, and
the workload), so a campaign of any engine can be measured, and each one
claims an event only where the records prove it:

* the RUNNING pass's course (`running_pass.py`): `skip`, `preempt`,
  `self_preempt`, `refund`, `preempt_skipped`, `length_clamp`; none of
  them in a step that replay cannot explain;
* the queues: `prepend` (a victim re-queued ahead of a request already
  waiting);
* the three features: `pad`, `prefix_hit`, `eviction` (a block handed out
  that held a cached prefix: the cache is tracked from the outputs, as the
  reference fills it), `stale_output` (`behaviour_coverage.FeatureTracker`);
* the threshold rule (`effective_threshold`): `threshold_lone` (a lone
  request granted past the configured threshold) and `threshold_adaptive`
  (the fair-share floor let a grant past it);
* how requests end: `stop_eos`, `stop_token`, `stop_max_tokens`,
  `stop_max_model_len`, and aborts by the status the request had:
  `abort_running`, `abort_waiting`, `abort_preempted`, `abort_finished`
  (an abort that found the request already finished);
* structured output: `grammar_wait` (a request waiting for its grammar
  passed over while a request behind it was admitted) and `grammar_error`
  (a failed grammar finished its request); LoRA: `lora_skip` (a request
  whose adapter would exceed `max_loras` passed over while one behind it
  was admitted); pipeline parallel: `decode_cadence` (the decode cadence
  passed a running request over); the prefill cadence: `prefill_deferred`
  (a step held back a prompt chunk or a waiting request's prefill); the
  engine's calls outside schedule(): `reset_preempted` (a cache reset
  preempted a running request) and `paused` (a pause held a live request
  back); pooling: `pooled` (a request finished on its pooled output) and
  `pooled_at_max_model_len` (one whose prompt is max_model_len long, which
  only a model that samples nothing can finish);
* `livelock`: after the workload's last arrival and abort, the state summary
  (queues, free blocks, each request's status, C and T) came back unchanged
  with requests still live: no token was appended in between, so the run
  repeats itself until `max_steps`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from ...spec.controls import PauseState, pause_state_after
from ...spec.invariants.replay import TraceReplay, reset_victims
from ...spec.invariants.views import StepView
from ...spec.request import RequestStatus
from ...spec.trace import StateSummary, StepRecord, Trace
from ...spec.workload import Workload
from .behaviour_coverage import FeatureTracker, stop_kind
from .running_pass import BlockTables, PassLog, Running, check_against, replay_running_pass

ABORTS = {
    RequestStatus.RUNNING: "abort_running",
    RequestStatus.WAITING: "abort_waiting",
    RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR: "abort_waiting",
    RequestStatus.PREEMPTED: "abort_preempted",
}


class EventTracker:
    """Fed one record at a time (`step`); keeps per live request only, and the summaries since the last event."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.config = workload.config
        self.requests = {r.request_id: r.request for r in workload.requests}
        self.replay = TraceReplay(Trace(workload, ()))
        self.tables = BlockTables()
        self.features = FeatureTracker()
        self.last = StateSummary(num_free_blocks=self.config.num_usable_blocks)
        self.cached: set[int] = set()  # blocks that carry a cached prefix (caching on)
        self.preempted_at: dict[str, int] = {}
        self.records: dict[int, StepRecord] = {}  # scheduled steps still in flight (async)
        self.quiet: set[tuple[object, ...]] = set()  # summaries seen after the last arrival and abort
        self.livelocked = False  # a summary came back with nothing appended in between
        self.last_step = -1
        self.unexplained = 0  # steps whose RUNNING pass the replay could not reproduce
        self.pause_state = PauseState.UNPAUSED  # as the records' controls set it
        self.pending_outside: set[str] = set()  # a cache reset's victims the next schedule() reports
        self.reported_outside: set[str] = set()  # those this step's schedule() reported

    def step(self, rec: StepRecord, view: StepView | None = None) -> Counter[str]:
        """This record's events. `view`: the record's view from a replay the caller runs anyway (the monitors'
        `check_trace(on_view=...)`); then this tracker's own replay stays idle, and must stay so for the run."""
        seen: Counter[str] = Counter()
        victims = reset_victims(self.last.running, rec)
        self.pause_state = pause_state_after(self.pause_state, rec.controls)
        view = self.replay.step(rec) if view is None else view
        seen["reset_preempted"] += len(victims)
        seen["paused"] += self._paused(rec)
        seen["stale_output"] += self.features.observe(rec)["stale_output"]
        seen.update(self._aborts(rec))
        self.tables.drop(rec.aborted)
        self.tables.drop(victims)
        self.pending_outside |= set(victims)  # reported by the next schedule()
        self.reported_outside = set(self.pending_outside) if rec.scheduled else set()
        if rec.scheduled:
            self.pending_outside = set()
        log = self._running_pass(view, rec)
        self.unexplained += not log.explained
        if log.explained:
            cadence = sum(why == "decode_cadence" for why in log.skipped.values())
            held = sum(why == "prefill_cadence" for why in log.skipped.values())
            seen["skip"] += len(log.skipped) - cadence - held
            seen["decode_cadence"] += cadence
            # A step that deferred a prefill it owed: a prompt chunk held back, or a waiting request left waiting.
            left = any(r.pre_waiting and not r.admitted and not r.pre_blocked for r in view.rows)
            seen["prefill_deferred"] += bool(view.prefills_deferred and (held or left))
            seen["preempt"] += len(log.other_victims)
            seen["self_preempt"] += len(log.self_preempted)
            seen["refund"] += len(log.refunded)
            seen["preempt_skipped"] += len(log.passed_victims)
            seen["length_clamp"] += len(log.length_clamped)
        self.tables.drop(rec.output.preempted_req_ids)
        for rid in rec.output.preempted_req_ids:
            self.preempted_at[rid] = rec.step
        seen.update(self._admissions(view, rec))
        seen["eviction"] += self._cache(view, rec, trusted=log.explained and not log.refunded)
        self.tables.drop(rec.finished)
        seen.update(self._threshold(view, rec))
        seen["grammar_wait"] += self._grammar_waits(view)
        seen["lora_skip"] += self._lora_skips(view)
        for rid, f in rec.finished.items():
            if f.status == RequestStatus.FINISHED_ERROR:
                seen["grammar_error"] += 1
            elif rid not in rec.aborted and rid not in rec.aborted_mid_step:  # aborts: by the status they had
                pooling = self.config.runner == "pooling"
                kind = stop_kind(self.requests[rid], f.status, f.output_token_ids, self.config.max_model_len, pooling)
                seen[kind] += 1
                seen["pooled_at_max_model_len"] += (
                    pooling and self.requests[rid].num_prompt_tokens == self.config.max_model_len
                )
        self._livelock(rec)
        self.last = rec.state
        if rec.scheduled:
            self.records[rec.step] = rec
        keep = set(rec.in_flight)
        self.records = {s: r for s, r in self.records.items() if s in keep}
        return +seen

    def _paused(self, rec: StepRecord) -> int:
        """1 if the step's pause held a live request back: PAUSED_ALL any, PAUSED_NEW one waiting that was not
        waiting for its grammar."""
        if self.pause_state == PauseState.UNPAUSED:
            return 0
        s = rec.state
        if self.pause_state == PauseState.PAUSED_ALL:
            return int(bool(s.running or s.waiting))
        blocked = RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
        return int(any(s.requests[rid].status != blocked for rid in s.waiting if rid in s.requests))

    def _aborts(self, rec: StepRecord) -> Counter[str]:
        seen: Counter[str] = Counter()
        for rid in (*rec.aborted, *rec.aborted_mid_step):  # by the status it had before the step, mid-step too
            if rid in rec.finished:
                before = self.last.requests.get(rid)
                seen[ABORTS[before.status] if before is not None else "abort_waiting"] += 1  # arrived this step
            elif self.workload.request(rid).arrival_step <= rec.step:
                seen["abort_finished"] += 1
        return seen

    @staticmethod
    def _grammar_waits(view: StepView) -> int:
        """Requests waiting for a grammar still compiling, with an admission behind them in the queue."""
        admitted = [r.pre_wait_pos for r in view.rows if r.admitted and r.pre_waiting]
        last = max(admitted, default=-1)
        return sum(1 for r in view.rows if r.pre_blocked and not r.pre_grammar_failed and 0 <= r.pre_wait_pos < last)

    def _lora_skips(self, view: StepView) -> int:
        """Requests passed over for max_loras: waiting, not admitted, their adapter not among the running ones when
        max_loras of them run as schedule() ends, and an admission behind them (nothing else held them back)."""
        limit = self.config.max_loras
        if limit is None:
            return 0
        lora = {r.request_id: self.requests[r.request_id].lora_int_id for r in view.rows}
        running = {lora[r.request_id] for r in view.rows if (r.pre_running and not r.preempted) or r.admitted}
        running.discard(0)
        last = max((r.pre_wait_pos for r in view.rows if r.admitted and r.pre_waiting), default=-1)
        return sum(
            1
            for r in view.rows
            if r.pre_waiting
            and not r.admitted
            and 0 <= r.pre_wait_pos < last
            and lora[r.request_id] > 0
            and lora[r.request_id] not in running
            and len(running) == limit
            and not r.pre_blocked
            and r.pre_num_stale_output_tokens == 0
        )

    def _running_pass(self, view: StepView, rec: StepRecord) -> PassLog:
        rows = sorted((r for r in view.rows if r.pre_running), key=lambda r: r.pre_run_pos)
        running = [
            Running(
                r.request_id,
                r.pre_num_computed_tokens,
                r.pre_num_tokens,
                r.pre_num_spec_tokens,
                r.pre_num_output_placeholders,
                r.num_prompt_tokens,
                r.max_tokens,
                r.priority,
                self.requests[r.request_id].arrival_time,
                self.tables.tables.get(r.request_id, ()),
                r.pre_cadence_wait,
                bool(view.prefills_deferred and r.pre_prefill_chunk),
            )
            for r in rows
        ]
        num_waiting = sum(r.pre_waiting for r in view.rows)
        holders = self.tables.holders()
        log = replay_running_pass(
            self.config, running, num_waiting, view.pre_num_free_blocks, holders, int(view.token_budget)
        )
        return check_against(log, rec.output, self.reported_outside)

    def _admissions(self, view: StepView, rec: StepRecord) -> Counter[str]:
        seen: Counter[str] = Counter()
        out = rec.output
        for n in out.scheduled_new_reqs:
            seen["prefix_hit"] += n.num_computed_tokens > 0
            seen["pad"] += n.req_id in out.scheduled_spec_decode_tokens
        pos = {r.request_id: r for r in view.rows}
        waited = [r.post_wait_pos for r in view.rows if r.pre_waiting and r.post_waiting]
        for rid in out.preempted_req_ids:
            row = pos.get(rid)
            if row is not None and row.post_waiting and any(row.post_wait_pos < p for p in waited):
                seen["prepend"] += 1
        return seen

    def _cache(self, view: StepView, rec: StepRecord, trusted: bool) -> int:
        """Blocks handed out that held a cached prefix; then mark what this step cached.

        A block is marked only where the reference's rules register it: the
        full blocks of a scheduled request's first min(C + n, T) tokens at
        allocation, and (async or spec decode) of its first C - in-flight
        tokens when its own output is absorbed. A step whose pass the replay
        could not follow (or that refunded an allocation the record no longer
        shows) may have handed out blocks unseen: the marks on free blocks are
        dropped there, so no later reuse is mistaken for an eviction.
        """
        self.tables.allocate(rec.output)
        if not self.config.enable_prefix_caching:
            return 0
        bs, out = self.config.block_size, rec.output
        handed = {b for n in out.scheduled_new_reqs for b in n.block_ids[n.num_computed_tokens // bs :]}
        handed |= {b for c in out.scheduled_cached_reqs for b in c.new_block_ids or ()}
        evicted = len(handed & self.cached) if trusted else 0
        self.cached -= handed
        if not trusted:
            self.cached &= set(self.tables.holders())
        rows = {r.request_id: r for r in view.rows}
        for rid, n in out.num_scheduled_tokens.items():
            row = rows[rid]
            start = row.num_hit_tokens if row.admitted else row.pre_num_computed_tokens
            self._mark(rid, min(start + n, row.pre_num_tokens))
        u = rec.updated_step
        absorbed = rec if u == rec.step else self.records.get(u) if u is not None else None
        if absorbed is not None and (self.config.async_scheduling or self.config.num_speculative_tokens > 0):
            for rid in absorbed.output.num_scheduled_tokens:
                live = rows.get(rid)
                fresh = self.preempted_at.get(rid, -1) < absorbed.step
                if (
                    live is not None
                    and live.post_running
                    and fresh
                    and absorbed.model_output.sampled_token_ids.get(rid)
                ):
                    done = live.post_num_computed_tokens - live.post_num_in_flight_tokens
                    self._mark(rid, min(done, live.post_num_tokens))
        return evicted

    def _mark(self, rid: str, num_tokens: int) -> None:
        table = self.tables.tables.get(rid, ())
        self.cached.update(table[: num_tokens // self.config.block_size])

    def _threshold(self, view: StepView, rec: StepRecord) -> Counter[str]:
        seen: Counter[str] = Counter()
        configured = self.config.long_prefill_token_threshold
        grants = rec.output.num_scheduled_tokens.values()
        if configured == 0 or not any(n > configured for n in grants):
            return seen
        eligible = sum(r.pre_running or r.pre_waiting for r in view.rows)
        if eligible <= 1:
            seen["threshold_lone"] += 1
        elif self.config.long_prefill_token_threshold_adaptive:
            seen["threshold_adaptive"] += 1
        return seen

    def finish(self) -> Counter[str]:
        """The events of the whole run: a livelock shows only once the run has reached `max_steps` live."""
        cut = self.last_step == self.workload.max_steps - 1 and bool(self.last.running or self.last.waiting)
        return Counter({"livelock": 1}) if self.livelocked and cut else Counter()

    def _livelock(self, rec: StepRecord) -> None:
        state, self.last_step = rec.state, rec.step
        if self.livelocked or rec.step < self.workload.last_event_step or not (state.running or state.waiting):
            return
        key = (
            state.running,
            state.waiting,
            state.num_free_blocks,
            len(rec.in_flight),
            tuple(sorted((rid, s.status, s.num_computed_tokens, s.num_tokens) for rid, s in state.requests.items())),
        )
        if rec.finished:
            self.quiet.clear()
        self.livelocked = key in self.quiet
        self.quiet.add(key)


def events(workload: Workload, records: Iterable[StepRecord]) -> Counter[str]:
    """How often each event happened in these records (the first records of a run will do)."""
    tracker, seen = EventTracker(workload), Counter[str]()
    for rec in records:
        seen.update(tracker.step(rec))
    return seen + tracker.finish()
