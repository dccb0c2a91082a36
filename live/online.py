"""The project's own monitors, judging a live scheduler's steps as they happen.

Design notes
------------
* No invariant is restated here: each step record goes through the same
  `TraceReplay` and the same catalogue and decision predicates that
  `schedspec check` runs on a trace file (`spec.invariants`), and the
  trace-wide checks through the same `monitor.History`. What differs is only
  that the workload is not known in advance: each request joins the replay's
  and the history's tables when it arrives (`add`), and leaves them a few
  steps after it finished and was reported (`_forget`), so memory follows the
  live requests, never the run's length.
* Arrival ranks (the FCFS order `arrival_ranks` gives a whole workload) are
  kept incrementally: a later arrival time gets the next rank; one that is
  not later (clock skew, equal times) re-ranks the live requests, which is
  what `arrival_ranks` would give over them.
* Sampling (`sample=N`, N > 1) judges one record in N and does not replay
  the others: at 1,000 running requests replaying a step costs a few times
  vLLM's own step (benchmarks/RESULTS.md). The replay `skip`s a record it
  does not judge, and before a judged one it is reseeded from vLLM's own
  pool and requests (`vllm_seed.py`), read as the record before it closed
  (`wants_seed`, `seed`); the prefix-cache keys are then vLLM's own
  (`add(..., hashes=request.block_hashes)`). So a judged step is judged in
  full, from the state vLLM really had, and what sampling gives up is the
  steps between (docs/live.md). The trace-wide checks still see every record:
  they are cheap.
* A release's known violations (`spec.versions.KNOWN_VIOLATIONS`) are
  counted but never reported as alarms, as `schedspec check` marks them.
* Every violation is counted per invariant; `report` (the caller logs or
  raises) gets each one, so the caller decides how loud to be.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence

from ..spec.config import SchedulerConfig
from ..spec.invariants.catalogue import Invariant
from ..spec.invariants.decisions import MONITORED, MONITORED_BY_NAME
from ..spec.invariants.monitor import History, Violation, problem_detail
from ..spec.invariants.replay import ReplaySeed, TraceReplay
from ..spec.request import Request
from ..spec.trace import StepRecord, Trace
from ..spec.versions import known_violation
from ..spec.workload import Workload

FORGET_AFTER = 4  # records between a request's report and forgetting it: more than the batch queue's depth
TRACE_WIDE = ("finished-reported-once", "stop-is-final")


def monitor_names() -> tuple[str, ...]:
    return tuple(inv.name for inv in MONITORED) + TRACE_WIDE


def select(names: Iterable[str] | None) -> tuple[tuple[Invariant, ...], bool]:
    """The step invariants to run and whether the trace-wide ones run; raises ValueError naming an unknown one."""
    if names is None:
        return MONITORED, True
    chosen = tuple(names)
    for n in chosen:
        if n not in MONITORED_BY_NAME and n not in TRACE_WIDE:
            raise ValueError(n)
    return tuple(MONITORED_BY_NAME[n] for n in chosen if n in MONITORED_BY_NAME), any(n in TRACE_WIDE for n in chosen)


class OnlineMonitor:
    def __init__(
        self,
        config: SchedulerConfig,
        invariants: Iterable[str] | None,
        sample: int,
        report: Callable[[Violation, int], None],
    ) -> None:
        self.step_invariants, trace_wide = select(invariants)
        self.trace_wide = set(TRACE_WIDE) if invariants is None else set(invariants) & set(TRACE_WIDE)
        self.release = config.vllm_version
        workload = Workload(config, ())
        self.replay = TraceReplay(Trace(workload, ()))
        self.history = History(workload) if trace_wide else None
        self.sample, self.report = sample, report
        self.sampled = sample > 1  # reseeded before each judged record, skipping the others
        self.hash_lists: dict[str, Sequence[Hashable]] = {}  # sampled: each request's vLLM block hashes
        self.seeds: dict[int, ReplaySeed] = {}
        # Records before a judged one that it reads: its pre-state's, and those still in the batch queue
        # (max_concurrent_batches: 2 under async scheduling, pp_size under pipeline parallel, pp + 1 under both).
        q = config.max_concurrent_batches
        self.window = q + 1 if q > 1 else 1
        self.counts: dict[str, int] = {}
        self.known_counts: dict[str, int] = {}
        self.steps_judged = 0
        self.latest = float("-inf")
        self.forget: deque[tuple[int, list[str]]] = deque()

    def add(self, request: Request, hashes: Sequence[Hashable] | None = None) -> None:
        """A request arrives; `hashes` (sampled mode) is the engine's list of its block hashes, which grows."""
        rid = request.request_id
        self.replay.requests[rid] = request
        if hashes is not None:
            self.hash_lists[rid] = hashes
        if self.history is not None:
            self.history.requests[rid] = request
        ranks = self.replay.ranks
        if request.arrival_time > self.latest:
            self.latest = request.arrival_time
            ranks[rid] = max(ranks.values(), default=-1) + 1
        else:
            times = sorted({r.arrival_time for r in self.replay.requests.values()})
            rank = {t: i for i, t in enumerate(times)}
            ranks.clear()
            ranks.update({k: rank[r.arrival_time] for k, r in self.replay.requests.items()})

    def judged(self, step: int) -> bool:
        return step % self.sample == 0

    def full(self, step: int) -> bool:
        """Whether record `step` must be assembled in full: a judged one, or one a judged step reads (the record
        before it, whose state is its pre-state, and under async scheduling the ones still in flight at it)."""
        return not self.sampled or any(self.judged(s) for s in range(step, step + self.window + 1))

    def wants_seed(self, step: int) -> bool:
        """Whether record `step` is judged after skipped ones: the engine's state is read as record step-1 closes."""
        return self.sampled and step > 0 and self.judged(step)

    def seed(self, step: int, seed: ReplaySeed) -> None:
        self.seeds[step] = seed
        for old in [s for s in self.seeds if s < step - 8]:  # a record never emitted (a shutdown mid-step)
            del self.seeds[old]

    def hashes_of(self, rid: str) -> Sequence[Hashable]:
        return self.hash_lists.get(rid, ())

    def step(self, rec: StepRecord, schedule_call: int) -> None:
        found: list[Violation] = []
        seed = self.seeds.pop(rec.step, None)
        if seed is not None and all(self.full(s) for s in self.replay.in_flight):
            self.replay.reseed(seed)
        if self.sampled and (not self.judged(rec.step) or self.replay.stale):
            self.replay.skip(rec)
        else:
            view = self.replay.step(rec)
            self.steps_judged += 1
            for inv in self.step_invariants:
                if not inv.holds(view):
                    found.append(Violation(inv.name, rec.step, problem_detail(inv.name, view) or inv.sentence))
        if self.history is not None:
            found.extend(v for v in self.history.step(rec) if v.invariant in self.trace_wide)
        for v in found:
            k = known_violation(v.invariant, self.release)
            if k is not None:
                self.known_counts[v.invariant] = self.known_counts.get(v.invariant, 0) + 1
                continue
            self.counts[v.invariant] = self.counts.get(v.invariant, 0) + 1
            self.report(v, schedule_call)
        self._forget(rec)

    def _forget(self, rec: StepRecord) -> None:
        """Drop the requests reported finished `FORGET_AFTER` records ago from every per-request table."""
        if rec.output.finished_req_ids:
            self.forget.append((rec.step, sorted(rec.output.finished_req_ids)))
        while self.forget and self.forget[0][0] <= rec.step - FORGET_AFTER:
            _, rids = self.forget.popleft()
            for rid in rids:
                if rid in rec.state.requests:  # a reused id that is live again
                    continue
                self.replay.requests.pop(rid, None)
                self.hash_lists.pop(rid, None)
                self.replay.ranks.pop(rid, None)
                self.replay.last_preempted.pop(rid, None)
                self.replay.prefill_chunk.pop(rid, None)
                shadow = self.replay.shadow
                for table in (shadow.outputs, shadow.num_cached, shadow._hashes):
                    table.pop(rid, None)
                if self.history is not None:
                    self.history.requests.pop(rid, None)
                    self.history.finished_at.pop(rid, None)
                    self.history.reported.pop(rid, None)
