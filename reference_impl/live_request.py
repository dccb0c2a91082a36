"""The mutable request the scheduler works on, field for field vLLM's `Request`.

The public API is pure (frozen `spec.state.RequestState` in, new one out), but
the algorithm is written against mutable objects, exactly as vLLM writes it,
so that `request.num_computed_tokens += n` reads the same in both and an
engineer can audit them side by side. `thaw` and `freeze` are the only
crossings between the two worlds.
"""

from __future__ import annotations

from ..spec.block_hash import block_hashes, chain_seed
from ..spec.request import FINISHED_STATUSES, GRAMMAR_COMPILING, Request, RequestStatus
from ..spec.state import RequestProperties, RequestState


class LiveRequest(RequestProperties):
    __slots__ = (
        "request",
        "request_id",
        "num_prompt_tokens",
        "max_tokens",
        "priority",
        "arrival_time",
        "status",
        "output_token_ids",
        "num_computed_tokens",
        "spec_token_ids",
        "num_output_placeholders",
        "num_in_flight_tokens",
        "num_stale_output_tokens",
        "drop_stale_output",
        "num_preemptions",
        "is_prefill_chunk",
        "stop_reason",
        "block_ids",
        "num_cached_blocks",
        "block_size",
        "grammar",
        "next_decode_eligible_step",
        "_block_hashes",
    )

    # Plain attributes here, where `RequestProperties` derives them from `request` (see `__init__`).
    request_id: str
    num_prompt_tokens: int
    max_tokens: int
    priority: int
    arrival_time: float

    def __init__(self, request: Request, block_size: int = 16) -> None:
        self.request = request
        # Fixed at arrival, and plain attributes as on vLLM's `Request`: the step reads them per request, where
        # `RequestProperties`' delegating properties would cost a call each.
        self.request_id = request.request_id
        self.num_prompt_tokens = request.num_prompt_tokens
        self.max_tokens = request.max_tokens
        self.priority = request.priority
        self.arrival_time = request.arrival_time
        # vllm/v1/request.py:Request.__init__: a request with a grammar waits for it to compile.
        self.status = (
            RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
            if request.structured_output
            else (RequestStatus.WAITING)
        )
        # Where vLLM's `structured_output_request.grammar` stands (spec.request.GRAMMAR_STATES); None without one.
        self.grammar: str | None = GRAMMAR_COMPILING if request.structured_output else None
        self.output_token_ids: list[int] = []
        self.num_computed_tokens = 0
        self.spec_token_ids: list[int] = []
        self.num_output_placeholders = 0
        self.num_in_flight_tokens = 0
        self.num_stale_output_tokens = 0
        self.drop_stale_output = False
        self.num_preemptions = 0
        self.is_prefill_chunk = False
        self.stop_reason: int | str | None = None
        # The block table lives in the KV manager in vLLM (`req_to_blocks`);
        # keeping it on the request makes the state one value per request.
        self.block_ids: list[int] = []
        self.num_cached_blocks = 0  # `num_cached_block[request_id]` of the KV manager
        self.block_size = block_size
        self.next_decode_eligible_step = 0  # async only: the PP decode cadence (rules.next_decode_eligible_step)
        self._block_hashes: tuple[int, ...] = ()

    # vLLM's derived properties (num_tokens, num_tokens_with_spec, ...) come from `RequestProperties`, shared with
    # the frozen `RequestState`, so the two cannot drift apart.

    @property
    def block_hashes(self) -> tuple[int, ...]:
        """vLLM's `request.block_hashes`: one per full block of prompt and outputs, extended as tokens arrive.

        Outputs are never removed (a stop trims only the tokens it did not
        append), so the known hashes stay a prefix and are extended, not redone.
        """
        if (len(self._block_hashes) + 1) * self.block_size <= self.num_tokens:
            seed = chain_seed(self.request.lora_int_id)
            self._block_hashes = block_hashes(self.all_token_ids, self.block_size, self._block_hashes, seed)
        return self._block_hashes

    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES  # a set, not `status.is_finished`: that property costs a call

    # ---- the crossing ----
    @classmethod
    def thaw(cls, s: RequestState, block_size: int = 16) -> LiveRequest:
        r = cls(s.request, block_size)
        r.status = s.status
        r.output_token_ids = list(s.output_token_ids)
        r.num_computed_tokens = s.num_computed_tokens
        r.spec_token_ids = list(s.spec_token_ids)
        r.num_output_placeholders = s.num_output_placeholders
        r.num_in_flight_tokens = s.num_in_flight_tokens
        r.num_stale_output_tokens = s.num_stale_output_tokens
        r.drop_stale_output = s.drop_stale_output
        r.num_preemptions = s.num_preemptions
        r.is_prefill_chunk = s.is_prefill_chunk
        r.stop_reason = s.stop_reason
        r.block_ids = list(s.block_ids)
        r.num_cached_blocks = s.num_cached_blocks
        r.grammar = s.grammar
        r.next_decode_eligible_step = s.next_decode_eligible_step
        return r

    def freeze(self) -> RequestState:
        return RequestState(
            request=self.request,
            status=self.status,
            output_token_ids=tuple(self.output_token_ids),
            num_computed_tokens=self.num_computed_tokens,
            spec_token_ids=tuple(self.spec_token_ids),
            num_output_placeholders=self.num_output_placeholders,
            num_in_flight_tokens=self.num_in_flight_tokens,
            num_stale_output_tokens=self.num_stale_output_tokens,
            drop_stale_output=self.drop_stale_output,
            num_preemptions=self.num_preemptions,
            is_prefill_chunk=self.is_prefill_chunk,
            stop_reason=self.stop_reason,
            block_ids=tuple(self.block_ids),
            num_cached_blocks=self.num_cached_blocks,
            grammar=self.grammar,
            next_decode_eligible_step=self.next_decode_eligible_step,
        )
