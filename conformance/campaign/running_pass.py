"""The RUNNING pass of one step, re-derived from a trace: who was served, skipped, granted, or preempted, and for whom.

A step record shows the pass's outcome (the grants and the preempted ids)
but not its course: which request was being served when a victim fell,
whether a victim had been granted earlier in the same pass (a refund, Z1),
whether it was a request the pass had already passed over (the `req_index`
fix, T21), or whether the request preempted itself. The coverage map
(`cell_coverage.py`) needs exactly those, for any engine's trace. So this
module replays the pass on numbers the trace determines: the state
`schedule()` started from (`spec.invariants.replay.TraceReplay`: C, T, the
drafts S and the placeholders P of each running request, in running order,
and the free-block count), and the block tables read from the outputs
(`BlockTables`), with the scheduler's own arithmetic rules
(`spec/rules.py`).

The replay is checked against the record: its grants (in order) and its
victims must be the step's. Where they are not (an engine that departs from
vLLM, or a step this replay does not model), `explained` is False and the
caller attributes no pass-level event to the step: a coverage counter must
never claim a behaviour the step did not show.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ...spec import rules
from ...spec.config import SchedulerConfig
from ...spec.output import SchedulerOutput
from ...spec.rules import num_owed_tokens, victim_key


@dataclass(frozen=True)
class Running:
    """One running request as `schedule()` found it."""

    request_id: str
    num_computed_tokens: int  # C
    num_tokens: int  # T
    num_spec_tokens: int  # S: drafts (or async placeholder drafts) held
    num_output_placeholders: int  # P: async only
    num_prompt_tokens: int
    max_tokens: int
    priority: int
    arrival_time: float
    block_ids: tuple[int, ...]
    decode_waits: bool = False  # the PP decode cadence holds it (async with pipeline parallel)
    prefill_held: bool = False  # its next prompt chunk, in a step that defers prefills


@dataclass
class PassLog:
    """The course of one RUNNING pass."""

    threshold: int  # the effective long-prefill threshold of the step
    granted: dict[str, int] = field(default_factory=dict)  # in grant order, refunds removed
    victims: list[tuple[str, str]] = field(default_factory=list)  # (victim, the request being served), in order
    refunded: list[str] = field(default_factory=list)  # victims granted earlier in the pass (PRIORITY, Z1)
    passed_victims: list[str] = field(default_factory=list)  # victims the pass had already skipped (PRIORITY, T21)
    skipped: dict[str, str] = field(
        default_factory=dict
    )  # why: "max_tokens" (async, Z2), "max_model_len", "nothing_owed"
    length_clamped: list[str] = field(default_factory=list)  # grants cut by max_model_len - C - s (to 0: skipped)
    explained: bool = True  # the replay reproduces the record's grants and victims

    @property
    def self_preempted(self) -> list[str]:
        return [v for v, served in self.victims if v == served]

    @property
    def other_victims(self) -> list[str]:
        return [v for v, served in self.victims if v != served]


class BlockTables:
    """Each live request's block table, read from the outputs alone (as `TraceReplay` reads them)."""

    def __init__(self) -> None:
        self.tables: dict[str, tuple[int, ...]] = {}

    def drop(self, request_ids: Iterable[str]) -> None:
        for rid in request_ids:
            self.tables.pop(rid, None)

    def allocate(self, out: SchedulerOutput) -> None:
        for n in out.scheduled_new_reqs:
            self.tables[n.req_id] = tuple(n.block_ids)
        for c in out.scheduled_cached_reqs:
            self.tables[c.req_id] = self.tables.get(c.req_id, ()) + tuple(c.new_block_ids or ())

    def holders(self) -> Counter[int]:
        return Counter(b for blocks in self.tables.values() for b in blocks)


def replay_running_pass(
    config: SchedulerConfig,
    running: Sequence[Running],
    num_waiting: int,
    num_free_blocks: int,
    holders: Mapping[int, int],
    token_budget: int | None = None,
) -> PassLog:
    """vllm/v1/core/sched/scheduler.py:Scheduler.schedule (793-1037), on numbers, as `reference_impl/scheduler.py`
    runs it."""
    L, bs, priority = config.max_model_len, config.block_size, config.policy == "priority"
    sampled = config.num_sampled_tokens_per_step
    log = PassLog(
        rules.effective_threshold(
            config.long_prefill_token_threshold,
            len(running) + num_waiting,
            config.long_prefill_token_threshold_adaptive,
            config.max_num_batched_tokens,
            config.vllm_version,
        )
    )
    queue = list(running)
    refs = Counter(holders)
    new_blocks: dict[str, int] = {}
    # `token_budget`: the step's own, where a pause took it away (PAUSED_ALL: 0); else the config's.
    token_budget = config.token_budget if token_budget is None else token_budget
    free, input_budget = num_free_blocks, config.max_num_batched_tokens

    def release(victim: Running) -> int:
        """Blocks a preemption returns to the free queue: its own unshared ones, and what it got this step."""
        freed = new_blocks.pop(victim.request_id, 0)
        for b in victim.block_ids:
            refs[b] -= 1
            freed += refs[b] == 0
        return freed

    i = 0
    while i < len(queue) and token_budget > 0 and input_budget > 0:
        r = queue[i]
        C = r.num_computed_tokens
        if rules.async_max_tokens_reached(r.num_output_placeholders, C, r.num_prompt_tokens, r.max_tokens):
            log.skipped[r.request_id] = "max_tokens"
            i += 1
            continue
        if r.decode_waits:
            log.skipped[r.request_id] = "decode_cadence"
            i += 1
            continue
        if r.prefill_held:
            log.skipped[r.request_id] = "prefill_cadence"
            i += 1
            continue
        owed = num_owed_tokens(r.num_tokens + r.num_spec_tokens, r.num_output_placeholders, C)
        budget = min(token_budget, input_budget)
        n = rules.running_num_new_tokens(owed, log.threshold, budget, L, C, sampled)
        if L - C - sampled < min(rules.clamp_to_threshold(owed, log.threshold), budget):
            log.length_clamped.append(r.request_id)  # to 0 as well: then it is skipped
        if n == 0:
            log.skipped[r.request_id] = "max_model_len" if owed > 0 else "nothing_owed"
            i += 1
            continue
        need = rules.num_blocks_to_allocate(rules.num_tokens_need_slot(C, n, 0, L), len(r.block_ids), bs)
        served_preempted = False
        while need > free:  # a running request's allocation has no watermark
            if priority:
                victim = max(queue, key=lambda q: victim_key(q.priority, q.arrival_time))
                at = queue.index(victim)
                del queue[at]
                if victim.request_id in log.granted:
                    restored = log.granted.pop(victim.request_id)
                    token_budget += restored
                    input_budget += restored
                    log.refunded.append(victim.request_id)
                elif at < i:
                    log.passed_victims.append(victim.request_id)
                if at < i:
                    i -= 1
            else:
                victim = queue.pop(rules.fcfs_victim_index(len(queue)))
            free += release(victim)
            log.victims.append((victim.request_id, r.request_id))
            if victim is r:
                served_preempted = True
                break
        if served_preempted:
            if rules.self_preemption_continues(config.policy, config.vllm_version):
                continue  # it removed itself; i already points at the next one
            break  # FCFS: it was the tail; the pass ends
        log.granted[r.request_id] = n
        new_blocks[r.request_id] = need
        free -= need
        token_budget -= n
        input_budget -= n
        i += 1
    return log


def check_against(log: PassLog, out: SchedulerOutput, preempted_outside: Iterable[str] = ()) -> PassLog:
    """Mark the replay unexplained unless its grants and victims are the record's (less `preempted_outside`: a
    cache reset's victims, which the step reports beside its own)."""
    running_ids = {c.req_id for c in out.scheduled_cached_reqs}
    granted = [(rid, n) for rid, n in out.num_scheduled_tokens.items() if rid in running_ids]
    victims = out.preempted_req_ids - set(preempted_outside)
    log.explained = granted == list(log.granted.items()) and {v for v, _ in log.victims} == victims
    return log
