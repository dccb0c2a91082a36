"""What one step hands to the model runner, and what comes back.

`SchedulerOutput` keeps the observable part of vLLM's (`vllm/v1/core/sched/output.py`):
the tokens granted per request in vLLM's order, the block ids the runner must
use, and the id sets. It uses the V2 model runner's layout, the default where
supported: a resumed request is listed among the new ones, with its full block
table (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1642-1644)). `resumed` marks it, so that the lifecycle
comparison can still tell a resume from a first admission.

`ModelRunnerOutput` is the fake runner's answer: the sampled tokens per
scheduled request, `()` for a partial prefill chunk, and under a pooling
runner the requests it pooled (their `pooler_output` is not None; the value
itself, a tensor, decides nothing in the scheduler).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


# Slotted: a step builds one of these per scheduled request, and a slotted object needs no dict of its own.
@dataclass(frozen=True, slots=True)
class NewRequestData:
    req_id: str
    num_computed_tokens: int  # at admission: the prefix hit (0 without caching)
    block_ids: tuple[int, ...]  # all of the request's blocks
    resumed: bool = False


@dataclass(frozen=True, slots=True)
class CachedRequestData:
    req_id: str
    num_computed_tokens: int  # before this step's advance
    new_block_ids: tuple[int, ...] | None  # only the newly allocated blocks; None if none


@dataclass(frozen=True)
class SchedulerOutput:
    num_scheduled_tokens: Mapping[str, int] = field(default_factory=dict)
    scheduled_new_reqs: tuple[NewRequestData, ...] = ()
    scheduled_cached_reqs: tuple[CachedRequestData, ...] = ()
    scheduled_spec_decode_tokens: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    preempted_req_ids: frozenset[str] = frozenset()
    finished_req_ids: frozenset[str] = frozenset()

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "num_scheduled_tokens": [[k, v] for k, v in self.num_scheduled_tokens.items()],
            "scheduled_new_reqs": [
                {
                    "req_id": r.req_id,
                    "num_computed_tokens": r.num_computed_tokens,
                    "block_ids": list(r.block_ids),
                    "resumed": r.resumed,
                }
                for r in self.scheduled_new_reqs
            ],
            "scheduled_cached_reqs": [
                {
                    "req_id": r.req_id,
                    "num_computed_tokens": r.num_computed_tokens,
                    "new_block_ids": None if r.new_block_ids is None else list(r.new_block_ids),
                }
                for r in self.scheduled_cached_reqs
            ],
            "scheduled_spec_decode_tokens": {k: list(v) for k, v in self.scheduled_spec_decode_tokens.items()},
            "preempted_req_ids": sorted(self.preempted_req_ids),
            "finished_req_ids": sorted(self.finished_req_ids),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SchedulerOutput:
        return cls(
            num_scheduled_tokens={k: v for k, v in d["num_scheduled_tokens"]},
            scheduled_new_reqs=tuple(
                NewRequestData(r["req_id"], r["num_computed_tokens"], tuple(r["block_ids"]), r.get("resumed", False))
                for r in d["scheduled_new_reqs"]
            ),
            scheduled_cached_reqs=tuple(
                CachedRequestData(
                    r["req_id"],
                    r["num_computed_tokens"],
                    None if r["new_block_ids"] is None else tuple(r["new_block_ids"]),
                )
                for r in d["scheduled_cached_reqs"]
            ),
            scheduled_spec_decode_tokens={k: tuple(v) for k, v in d.get("scheduled_spec_decode_tokens", {}).items()},
            preempted_req_ids=frozenset(d["preempted_req_ids"]),
            finished_req_ids=frozenset(d["finished_req_ids"]),
        )


@dataclass(frozen=True)
class ModelRunnerOutput:
    """Sampled tokens per scheduled request, in `num_scheduled_tokens` order; the pooled requests (a pooling runner).

    A trace step writes `pooler_output` beside `model_output` (`StepRecord.to_json`), so the sampled tokens keep
    their one shape."""

    sampled_token_ids: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    pooler_output: frozenset[str] = frozenset()

    def to_json(self) -> dict[str, list[int]]:
        return {k: list(v) for k, v in self.sampled_token_ids.items()}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ModelRunnerOutput:
        return cls({k: tuple(v) for k, v in d.items()})
