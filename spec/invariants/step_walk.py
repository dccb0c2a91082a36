"""One step's decisions, walked in vLLM's order: the context the decision invariants share.

`schedule()` decides in a fixed order: the RUNNING pass visits `running`
front to back, granting, allocating and preempting; the WAITING pass visits
the queue from its head, admitting until the first request that fails; then
`update_from_output()` appends, stops and frees request by request. A
decision is only right or wrong *at its turn*: with the budget, the free
blocks and the cache as the requests before it left them. So the walk goes
through a step's record in that order, and at each turn asks the rules
(`spec/rules.py`) what vLLM 0.33.0 decides there, compares it with what
the record says the engine decided, and then moves on with what the
engine did (its grants and its block ids), so that each problem is a
decision taken wrongly at its own turn, not the echo of an earlier one.

The budget left, the running list and the victims are held here; the block
pool and the prefix cache are the replay's `PoolShadow`. What each pass
checks is in `running_pass.py`, `waiting_pass.py` and `update_pass.py`; the
invariants that read the problems found are in `decisions.py`.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..config import SchedulerConfig
from ..output import CachedRequestData, NewRequestData, SchedulerOutput
from ..request import Request
from ..trace import StepRecord
from .pool_shadow import PoolShadow
from .views import Row, StepView

GRANT = "grant-exact"
VICTIMS = "victims-exact"
WORK = "running-work-conserving"
ADMISSION = "admission-exact"
PREFIX_HIT = "prefix-hit-exact"
BLOCK_CHOICE = "block-choice-exact"
STOP = "stop-exact"
ROLLBACK = "rollback-exact"
GRAMMAR = "grammar-wait-exact"
LORA = "lora-limit-exact"
CADENCE = "decode-cadence-exact"
PREFILL = "prefill-cadence-exact"
CONTROLS = "controls-exact"
POOLING = "pooling-exact"


class StepWalk:
    """The step being walked: the view's rows, the record, the shadow, and what the passes found."""

    def __init__(
        self,
        config: SchedulerConfig,
        requests: Mapping[str, Request],
        shadow: PoolShadow,
        view: StepView,
        rec: StepRecord,
        queues: tuple[tuple[str, ...], tuple[str, ...]],
        prefill_chunk: Mapping[str, bool],
        current_step: int = 0,
        decode_eligible: Mapping[str, int] | None = None,
    ) -> None:
        self.config, self.requests, self.shadow, self.view, self.rec = config, requests, shadow, view, rec
        self.rows: dict[str, Row] = {r.request_id: r for r in view.rows}
        self.prefill_chunk = prefill_chunk  # is_prefill_chunk before this schedule()
        self.current_step = current_step  # this schedule()'s number, counting every call (vLLM's `current_step`)
        self.decode_eligible = decode_eligible or {}  # next_decode_eligible_step per request, before it
        out: SchedulerOutput = rec.output
        self.grants: Mapping[str, int] = out.num_scheduled_tokens
        self.new_reqs: dict[str, NewRequestData] = {n.req_id: n for n in out.scheduled_new_reqs}
        self.cached_reqs: dict[str, CachedRequestData] = {c.req_id: c for c in out.scheduled_cached_reqs}
        self.victims_recorded = out.preempted_req_ids  # this schedule()'s own: the replay takes a reset's out
        self.problems: dict[str, str] = {}
        # The pass state, as the running pass leaves it for the waiting pass.
        self.token_budget = config.token_budget
        self.input_budget = config.max_num_batched_tokens
        self.running = list(queues[0])  # `running` as the pass changes it: victims leave it
        self.waiting = queues[1]  # the queue in pop order: the FCFS deque, or the PRIORITY heap sorted
        self.threshold = 0  # the step's effective long-prefill threshold, fixed before the running pass
        self.scheduled_running: dict[str, int] = {}  # the running pass's grants, in pass order
        self.victims: list[str] = []
        self.prefill_scheduled = False
        self.reached: set[str] = set()  # the waiting requests the pass got to (skipped ones included)
        self.grammar_errors_found: list[str] = []  # failed grammars the pass got to, for the update to finish
        self.lora_skipped: set[str] = set()  # passed over for max_loras
        self.skipped: list[str] = []  # the waiting requests the pass passed over for a reason of their own
        self.defer_prefills = False  # the prefill cadence holds every prefill back this step (`prefill_cadence.py`)
        self.prefill_admitted = False  # an admission with prompt left to compute
        self.pause_state = 0  # spec.controls.PauseState, as the step's controls left it
        self.dropping: set[str] = set()  # stale output dropped, not delivered (a cache reset's victims)

    def flag(self, invariant: str, detail: str) -> None:
        """Keep the first problem of each invariant in this step."""
        self.problems.setdefault(invariant, detail)

    def new_blocks(self, rid: str) -> tuple[int, ...]:
        """The blocks the record gives a scheduled request: all but its hit (admitted) or its new ones (running)."""
        if rid in self.new_reqs:
            n = self.new_reqs[rid]
            hit = n.num_computed_tokens // self.config.block_size if self.config.enable_prefix_caching else 0
            return n.block_ids[hit:]
        c = self.cached_reqs.get(rid)
        return tuple(c.new_block_ids or ()) if c is not None else ()

    def allocate(self, rid: str, hit: tuple[int, ...] = ()) -> None:
        """The record's allocation for `rid`, into the shadow; a block not taken from the queue's front is flagged."""
        problem = self.shadow.take(rid, hit, self.new_blocks(rid))
        if problem:
            self.flag(BLOCK_CHOICE, problem)
