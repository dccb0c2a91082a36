"""The scheduler's state, frozen: what one `schedule()` or `update_from_output()` reads and returns.

The fields are vLLM's (`vllm/v1/request.py`, `Scheduler.__init__`,
`BlockPool`) under vLLM's names, including those only later features move
(drafts, output placeholders, in-flight and stale counters, block hashes), so
that prefix caching, speculative decoding and async scheduling extend the
same state instead of reshaping it.

Two representation choices, both observationally exact:

* The PRIORITY waiting queue is vLLM's heap, but every observable use of it
  (`peek`, `pop`, iteration, removal) depends only on its contents ordered by
  `Request.__lt__`, so it is stored as that sorted order.
* Without prefix caching a block is held by exactly one request, so its
  `ref_cnt` is not stored (`block_ref_cnt` is None) but derived from the
  block tables. With prefix caching blocks are shared and `ref_cnt` is
  stored, so that the invariant "a block's ref count is the number of block
  tables holding it" checks something.
* Block hashes are a function of the tokens (`spec.block_hash`), so only the
  cache's side is stored: which blocks are cached under which hash, in vLLM's
  insertion order (`BlockHashToBlockMap`: the first one is the one a hit
  returns).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .config import SchedulerConfig
from .request import Request, RequestStatus
from .rules import num_owed_tokens


class RequestProperties:
    """vLLM's derived request properties (vllm/v1/request.py:Request (294-304)), stated once for both request types.

    The frozen `RequestState` and the reference's mutable `LiveRequest`
    (`reference_impl/live_request.py`) both inherit them. Each class only has
    to hold `request`, `output_token_ids`, `spec_token_ids`,
    `num_output_placeholders` and `num_computed_tokens`. The empty
    `__slots__` keeps `LiveRequest` slotted.
    """

    __slots__ = ()

    if TYPE_CHECKING:  # what each subclass holds; declared only for the type checker, so no dataclass sees them
        request: Request
        output_token_ids: Sequence[int]
        spec_token_ids: Sequence[int]
        num_output_placeholders: int
        num_computed_tokens: int

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def num_prompt_tokens(self) -> int:
        return self.request.num_prompt_tokens

    @property
    def num_tokens(self) -> int:
        return self.request.num_prompt_tokens + len(self.output_token_ids)

    @property
    def num_tokens_with_spec(self) -> int:
        return self.num_tokens + len(self.spec_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_owed_tokens(self) -> int:
        """The seed formula (`spec.rules.num_owed_tokens`), which returns an int on ints."""
        owed: int = num_owed_tokens(self.num_tokens_with_spec, self.num_output_placeholders, self.num_computed_tokens)
        return owed

    @property
    def all_token_ids(self) -> tuple[int, ...]:
        return self.request.prompt_token_ids + tuple(self.output_token_ids)

    # Fixed at arrival; vLLM keeps them on the request, here they live on the immutable `Request`.
    @property
    def max_tokens(self) -> int:
        return self.request.max_tokens

    @property
    def priority(self) -> int:
        return self.request.priority

    @property
    def arrival_time(self) -> float:
        return self.request.arrival_time


@dataclass(frozen=True)
class RequestState(RequestProperties):
    request: Request
    status: RequestStatus = RequestStatus.WAITING
    output_token_ids: tuple[int, ...] = ()
    num_computed_tokens: int = 0
    spec_token_ids: tuple[int, ...] = ()
    num_output_placeholders: int = 0
    num_in_flight_tokens: int = 0
    num_stale_output_tokens: int = 0
    drop_stale_output: bool = False
    num_preemptions: int = 0
    is_prefill_chunk: bool = False
    stop_reason: int | str | None = None
    block_ids: tuple[int, ...] = ()  # the request's block table, in position order
    num_cached_blocks: int = 0  # prefix caching: leading blocks already registered (num_cached_block)
    grammar: str | None = None  # structured output: "compiling", "compiled" or "failed" (spec.request)
    # Async scheduling: the schedule() call (`current_step`) from which the running pass may decode it again
    # (pipeline parallel's decode cadence, `rules.next_decode_eligible_step`); 0 until its first decode.
    next_decode_eligible_step: int = 0


@dataclass(frozen=True)
class PrefillCadence:
    """What the prefill cadence keeps between steps (vllm/v1/core/sched/scheduler.py:Scheduler.__init__ (392-425)).

    `deferred_waiting`: the waiting requests passed over for a reason of their own (a grammar, an adapter, stale
    output) or that arrived blocked, until admitted or finished; before 0.31.0 the same requests are vLLM's
    `skipped_waiting`. `prefill_capacity_bound`: the last step that did not defer left a waiting request it could
    have served. `last_prefill_step` is None until set: vLLM starts it one interval back. vLLM keeps them for
    every config, since any schedule() may be throttled, and so does the spec.
    """

    prefill_capacity_bound: bool = False
    deferred_waiting: frozenset[str] = frozenset()
    num_executed_steps: int = 0
    last_prefill_step: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "prefill_capacity_bound": self.prefill_capacity_bound,
            "deferred_waiting": sorted(self.deferred_waiting),
            "num_executed_steps": self.num_executed_steps,
            "last_prefill_step": self.last_prefill_step,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PrefillCadence:
        return cls(
            bool(d["prefill_capacity_bound"]),
            frozenset(d["deferred_waiting"]),
            int(d["num_executed_steps"]),
            d["last_prefill_step"],
        )


@dataclass(frozen=True)
class SchedulerState:
    config: SchedulerConfig
    # Every live request, in the order it was added (vLLM's `requests` dict).
    requests: Mapping[str, RequestState] = field(default_factory=dict)
    running: tuple[str, ...] = ()
    # FCFS: deque order, head first. PRIORITY: heap contents in pop order.
    waiting: tuple[str, ...] = ()
    # Free block ids, front (next to be allocated) first. Block 0 is the null block and never free.
    free_block_queue: tuple[int, ...] = ()
    # Finished since the previous schedule(); reported by the next one (I-18).
    finished_req_ids: frozenset[str] = frozenset()
    current_step: int = 0
    # Prefix caching only. Held blocks' ref counts (None: derive, one holder each) and the
    # cache: block hash -> the block ids cached under it, first-inserted first.
    block_ref_cnt: Mapping[int, int] | None = None
    cached_block_hash_to_block: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    # Structured output: the requests whose failed grammar the last schedule() found; the next
    # update_from_output() finishes them (vLLM's `grammar_compile_error_reqs`).
    grammar_compile_error_reqs: frozenset[str] = frozenset()
    # 0.28.0-0.30.0 under FCFS: the leading `waiting` requests that sit in vLLM's second queue,
    # `skipped_waiting` (spec.versions `one-waiting-queue`). 0 elsewhere.
    num_skipped_waiting: int = 0
    prefill_cadence: PrefillCadence = PrefillCadence()
    # The engine's calls outside schedule() (spec/controls.py): the pause state the engine core set (vLLM's
    # PauseState value), and the requests reset_prefix_cache preempted, which the next schedule() reports.
    pause_state: int = 0
    reset_preempted_req_ids: frozenset[str] = frozenset()

    @classmethod
    def initial(cls, config: SchedulerConfig) -> SchedulerState:
        return cls(config=config, free_block_queue=tuple(range(1, config.num_gpu_blocks)))

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_queue)

    def held_blocks(self) -> Iterator[tuple[str, int]]:
        for rid, r in self.requests.items():
            for b in r.block_ids:
                yield rid, b

    def ref_cnt(self) -> dict[int, int]:
        """Every held block's ref count: stored under prefix caching, otherwise one per holder."""
        if self.block_ref_cnt is not None:
            return dict(self.block_ref_cnt)
        counts: dict[int, int] = {}
        for _, b in self.held_blocks():
            counts[b] = counts.get(b, 0) + 1
        return counts

    def block_hash_of(self) -> dict[int, int]:
        """Each cached block's hash (a block is cached under at most one hash)."""
        return {b: h for h, blocks in self.cached_block_hash_to_block.items() for b in blocks}

    def unfinished(self) -> bool:
        return bool(self.running or self.waiting)


def request_state_to_json(r: RequestState) -> dict[str, Any]:
    q = r.request
    return {
        "request": q.to_json(),
        "status": r.status.name,
        "output_token_ids": list(r.output_token_ids),
        "num_computed_tokens": r.num_computed_tokens,
        "spec_token_ids": list(r.spec_token_ids),
        "num_output_placeholders": r.num_output_placeholders,
        "num_in_flight_tokens": r.num_in_flight_tokens,
        "num_stale_output_tokens": r.num_stale_output_tokens,
        "drop_stale_output": r.drop_stale_output,
        "num_preemptions": r.num_preemptions,
        "is_prefill_chunk": r.is_prefill_chunk,
        "stop_reason": r.stop_reason,
        "block_ids": list(r.block_ids),
        "num_cached_blocks": r.num_cached_blocks,
        **({"grammar": r.grammar} if r.grammar is not None else {}),
        **({"next_decode_eligible_step": r.next_decode_eligible_step} if r.next_decode_eligible_step else {}),
    }


def state_to_json(s: SchedulerState) -> dict[str, Any]:
    """A full state, for counterexamples that start mid-run (the Z3 ones): lossless."""
    return {
        "config": s.config.to_dict(),
        "requests": [request_state_to_json(r) for r in s.requests.values()],
        "running": list(s.running),
        "waiting": list(s.waiting),
        "free_block_queue": list(s.free_block_queue),
        "finished_req_ids": sorted(s.finished_req_ids),
        "current_step": s.current_step,
        "block_ref_cnt": None if s.block_ref_cnt is None else [[b, n] for b, n in s.block_ref_cnt.items()],
        # Hashes go below 2^62: JSON integers, exact in Python (not in JavaScript doubles).
        "cached_block_hash_to_block": [[h, list(bs)] for h, bs in s.cached_block_hash_to_block.items()],
        **(
            {"grammar_compile_error_reqs": sorted(s.grammar_compile_error_reqs)} if s.grammar_compile_error_reqs else {}
        ),
        **({"num_skipped_waiting": s.num_skipped_waiting} if s.num_skipped_waiting else {}),
        **({"prefill_cadence": s.prefill_cadence.to_json()} if s.prefill_cadence != PrefillCadence() else {}),
        **({"pause_state": s.pause_state} if s.pause_state else {}),
        **({"reset_preempted_req_ids": sorted(s.reset_preempted_req_ids)} if s.reset_preempted_req_ids else {}),
    }


def state_from_json(d: dict[str, Any], where: str = "state") -> SchedulerState:
    from .errors import SpecError

    try:
        requests = {}
        for r in d["requests"]:
            q = dict(r["request"])
            q["prompt_token_ids"] = tuple(q["prompt_token_ids"])
            q["stop_token_ids"] = tuple(q["stop_token_ids"])
            fields = {k: v for k, v in r.items() if k != "request"}
            fields["status"] = RequestStatus[fields["status"]]
            for k in ("output_token_ids", "spec_token_ids", "block_ids"):
                fields[k] = tuple(fields[k])
            requests[q["request_id"]] = RequestState(request=Request(**q), **fields)
        return SchedulerState(
            config=SchedulerConfig.from_dict(d["config"], f"{where}.config"),
            requests=requests,
            running=tuple(d["running"]),
            waiting=tuple(d["waiting"]),
            free_block_queue=tuple(d["free_block_queue"]),
            finished_req_ids=frozenset(d["finished_req_ids"]),
            current_step=d["current_step"],
            block_ref_cnt=None if d.get("block_ref_cnt") is None else {b: n for b, n in d["block_ref_cnt"]},
            cached_block_hash_to_block={h: tuple(bs) for h, bs in d.get("cached_block_hash_to_block", [])},
            grammar_compile_error_reqs=frozenset(d.get("grammar_compile_error_reqs", ())),
            num_skipped_waiting=d.get("num_skipped_waiting", 0),
            prefill_cadence=PrefillCadence.from_json(d["prefill_cadence"])
            if "prefill_cadence" in d
            else PrefillCadence(),
            pause_state=d.get("pause_state", 0),
            reset_preempted_req_ids=frozenset(d.get("reset_preempted_req_ids", ())),
        )
    except SpecError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise SpecError(where, str(e), "is not a valid scheduler state") from None
