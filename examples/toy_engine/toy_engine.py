"""A minimal engine for schedspec's harness: the `Engine` protocol, method by method.

This is an example of the *protocol*, not of a scheduler. Every decision is
delegated to schedspec's reference scheduler, so the engine passes
certification by construction; replace the body of each method with calls
into your own scheduler. What each method must hand back, and what the
harness compares, is written beside it (and in docs/engines.md).

Certify it from the command line (with this folder on PYTHONPATH):

    PYTHONPATH=examples/toy_engine schedspec certify --engine toy_engine:make --workloads 200

or from a test, through schedspec's pytest plugin (see test_toy_engine.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from schedspec.reference_impl import ReferenceEngine
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.output import ModelRunnerOutput, SchedulerOutput
from schedspec.spec.request import Request
from schedspec.spec.trace import FinishedRequest, RequestSummary, StateSummary

__version__ = "0.1.0"  # certificates record it as the engine's version


class ToyEngine:
    """One scheduler instance for one workload; the harness makes a fresh one per workload."""

    name = "toy"  # how traces and certificates name this engine

    def __init__(self, config: SchedulerConfig) -> None:
        # `config` is the workload's: token budget, max_num_seqs, block_size,
        # num_gpu_blocks, policy (fcfs|priority), chunking knobs. Your
        # scheduler must honour every field, or say so by raising here.
        self._inner = ReferenceEngine(config)

    def add_request(self, request: Request) -> None:
        """A request arrives (before this step's schedule); it joins the waiting queue."""
        self._inner.add_request(request)

    def abort_request(self, request_id: str) -> FinishedRequest | None:
        """Finish it as FINISHED_ABORTED and free its blocks; None if it had already finished."""
        return self._inner.abort_request(request_id)

    def schedule(self) -> SchedulerOutput:
        """Decide one step: tokens per request, in order, and the block ids handed to the model runner."""
        return self._inner.schedule()

    def update_from_output(
        self, output: SchedulerOutput, model_output: ModelRunnerOutput
    ) -> Mapping[str, FinishedRequest]:
        """Absorb the sampled tokens of the step `output` scheduled; return the requests that finished."""
        return self._inner.update_from_output(output, model_output)

    def update_draft_token_ids(self, draft_token_ids: Mapping[str, tuple[int, ...]]) -> None:
        """Speculative decoding only: the drafter's proposals for the next step."""
        self._inner.update_draft_token_ids(draft_token_ids)

    def summary(self) -> StateSummary:
        """The state every engine can expose: queues in order, free blocks, per-request counters."""
        s = self._inner.scheduler
        return StateSummary(
            running=tuple(r.request_id for r in s.running),
            waiting=tuple(r.request_id for r in s.waiting),  # in the order requests would be admitted
            num_free_blocks=s.block_pool.get_num_free_blocks(),
            requests={
                rid: RequestSummary(r.status, r.num_computed_tokens, r.num_tokens) for rid, r in s.requests.items()
            },
        )

    def close(self) -> None:
        """Optional: the harness calls it when the workload is done (free a GPU, stop a process)."""


def make(config: SchedulerConfig) -> ToyEngine:
    """The engine factory the harness imports as `toy_engine:make`."""
    return ToyEngine(config)
