"""What a user submits (`Request`) and the lifecycle it goes through (`RequestStatus`).

`Request` holds only what the client fixes at submission; everything the
scheduler changes lives in `spec.state.RequestState`. Keeping the two apart
is what lets an engine be driven from a workload file: the workload is a list
of `Request`s plus the fake model's outputs, and nothing else.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class RequestStatus(enum.IntEnum):
    """vLLM's statuses, in vLLM's order (`vllm/v1/request.py:RequestStatus (373-386)`).

    The order matters: vLLM defines `is_finished(s)` as `s > PREEMPTED`.
    A request with a grammar (structured output) starts in
    WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR; the statuses of remote KV and
    streaming input are kept so that traces of a real vLLM can be read,
    although the reference never enters them.
    """

    WAITING = enum.auto()
    WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR = enum.auto()
    WAITING_FOR_REMOTE_KVS = enum.auto()
    WAITING_FOR_STREAMING_REQ = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH_CAPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()
    FINISHED_IGNORED = enum.auto()
    FINISHED_ERROR = enum.auto()
    FINISHED_REPETITION = enum.auto()

    @property
    def is_finished(self) -> bool:
        return self > RequestStatus.PREEMPTED


FINISHED_STATUSES = frozenset(s for s in RequestStatus if s.is_finished)
# vllm/v1/core/sched/scheduler.py:Scheduler._is_blocked_waiting_status: waiting, but not schedulable until an
# outside event (a grammar compiled, remote KV received, more streamed input).
BLOCKED_STATUSES = frozenset(
    {
        RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR,
        RequestStatus.WAITING_FOR_REMOTE_KVS,
        RequestStatus.WAITING_FOR_STREAMING_REQ,
    }
)

# A structured-output request's grammar as the scheduler finds it (vllm/v1/structured_output/request.py:
# StructuredOutputRequest.grammar): None while the compile runs, the grammar once it compiled, the exception
# if it failed. The engine loop finishes a compile at the step the workload says (`workload.Grammar`).
GRAMMAR_COMPILING, GRAMMAR_COMPILED, GRAMMAR_FAILED = "compiling", "compiled", "failed"
GRAMMAR_STATES = (GRAMMAR_COMPILING, GRAMMAR_COMPILED, GRAMMAR_FAILED)


@dataclass(frozen=True)
class Request:
    """A request as submitted. `eos_token_id` is the effective one: None under `ignore_eos`.

    `arrival_time` is vLLM's float arrival time; under PRIORITY it breaks ties
    between equal priorities, both in the waiting heap and in the victim key.
    """

    request_id: str
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    min_tokens: int = 0
    eos_token_id: int | None = None
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    priority: int = 0
    arrival_time: float = 0.0
    # SamplingParams.structured_outputs is set: the request waits for its grammar to compile before it can be
    # scheduled (vllm/v1/request.py:Request.__init__ puts it in WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR).
    structured_output: bool = False
    # LoRA: the adapter's `LoRARequest.lora_int_id` (>= 1), 0 without one. Its blocks are cached apart from other
    # adapters' (vllm/v1/core/kv_cache_utils.py:_gen_lora_extra_hash_keys), and an adapter counts against max_loras.
    lora_int_id: int = 0
    # SamplingParams/PoolingParams.skip_reading_prefix_cache: the request takes no prefix hit (a pooling task that
    # needs every prompt position's output, or prompt logprobs) but caches what it computes
    # (vllm/v1/request.py:Request.get_skip_reading_prefix_cache).
    skip_reading_prefix_cache: bool = False

    def to_json(self) -> dict[str, Any]:
        """The request's fields, as workloads, traces, states and live captures all write them."""
        return {
            "request_id": self.request_id,
            "prompt_token_ids": list(self.prompt_token_ids),
            "max_tokens": self.max_tokens,
            "min_tokens": self.min_tokens,
            "eos_token_id": self.eos_token_id,
            "ignore_eos": self.ignore_eos,
            "stop_token_ids": list(self.stop_token_ids),
            "priority": self.priority,
            "arrival_time": self.arrival_time,
            **({"structured_output": True} if self.structured_output else {}),
            **({"lora_int_id": self.lora_int_id} if self.lora_int_id else {}),
            **({"skip_reading_prefix_cache": True} if self.skip_reading_prefix_cache else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any], default_arrival_time: float = 0.0) -> Request:
        """The inverse of `to_json`; a field left out takes its default (a workload file may omit them)."""
        return cls(
            request_id=d["request_id"],
            prompt_token_ids=tuple(d["prompt_token_ids"]),
            max_tokens=d["max_tokens"],
            min_tokens=d.get("min_tokens", 0),
            eos_token_id=d.get("eos_token_id"),
            ignore_eos=d.get("ignore_eos", False),
            stop_token_ids=tuple(d.get("stop_token_ids", ())),
            priority=d.get("priority", 0),
            arrival_time=float(d.get("arrival_time", default_arrival_time)),
            structured_output=bool(d.get("structured_output", False)),
            lora_int_id=d.get("lora_int_id", 0),
            skip_reading_prefix_cache=bool(d.get("skip_reading_prefix_cache", False)),
        )

    @functools.cached_property
    def num_prompt_tokens(self) -> int:
        # Cached: the reference reads it several times per request per step, and the prompt never changes.
        return len(self.prompt_token_ids)

    @functools.cached_property
    def effective_eos_token_id(self) -> int | None:
        # SamplingParams: `ignore_eos` nulls the EOS id; stop tokens still apply.
        return None if self.ignore_eos else self.eos_token_id
