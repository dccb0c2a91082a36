"""Drive the reference and the real vLLM 0.33.0 by hand, the way vLLM's own scheduler tests do.

A scenario of §8 (vLLM's tests) or §8b (observed runs) is
written once, against the `Engine` protocol, and runs on both engines: the
reference in-process and vLLM behind its driver pipe. The expected numbers
come from vLLM's tests and observed runs, never from either engine, so a scenario can fail on
either one.

The vLLM half is skipped when its venv is absent (it is never built from
here); one driver process serves every test of the session.

Only what the protocol shows is observable: scheduled tokens and drafts,
block ids and prefix hits in the output, each request's status, C and T,
and the free-block count (cached-but-unreferenced blocks count as free).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

import pytest

from schedspec.conformance.engines.vllm import vllm_venv_ready
from schedspec.conformance.engines.vllm_pool import vllm_engine_factory
from schedspec.reference_impl import ReferenceEngine
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.output import ModelRunnerOutput, SchedulerOutput
from schedspec.spec.request import Request
from schedspec.spec.trace import FinishedRequest, RequestSummary, StateSummary

needs_vllm = pytest.mark.skipif(
    not vllm_venv_ready(), reason="no vLLM venv; build it with conformance/vllm_env/setup_vllm_ref.sh"
)
ENGINES = ["reference", pytest.param("vllm", marks=needs_vllm)]

_factory = None


def _vllm_factory():
    global _factory
    if _factory is None:
        _factory = vllm_engine_factory()  # closes its drivers at exit
    return _factory


class Driven:
    """One engine under a hand-written script: schedule, update (oldest output first), drafts, aborts."""

    def __init__(self, kind: str, config: SchedulerConfig) -> None:
        self.kind = kind
        self.engine = ReferenceEngine(config) if kind == "reference" else _vllm_factory()(config)
        self.in_flight: deque[tuple[SchedulerOutput, StateSummary]] = deque()  # with the state right after

    def add(self, *requests: Request) -> None:
        for r in requests:
            self.engine.add_request(r)

    def abort(self, request_id: str) -> FinishedRequest | None:
        return self.engine.abort_request(request_id)

    def schedule(self) -> SchedulerOutput:
        out = self.engine.schedule()
        self.in_flight.append((out, self.engine.summary()))
        return out

    def update(
        self, sampled: Mapping[str, Iterable[int]] | None = None, *, default: int | None = None
    ) -> dict[str, FinishedRequest]:
        """Absorb the oldest scheduled output. Unnamed requests sample `default` if that step finished
        their prefill (C >= T right after its schedule, as the mock runner decides), else []."""
        out, state = self.in_flight.popleft()
        sampled = {k: tuple(v) for k, v in (sampled or {}).items()}
        for rid in out.num_scheduled_tokens:
            if rid not in sampled:
                r = state.requests.get(rid)
                done = default is not None and r is not None and r.num_computed_tokens >= r.num_tokens
                sampled[rid] = (default,) if done else ()
        return dict(self.engine.update_from_output(out, ModelRunnerOutput(sampled)))

    def step(self, sampled: Mapping[str, Iterable[int]] | None = None, default: int | None = 0):
        """One synchronous step: schedule, then update with that step's output."""
        out = self.schedule()
        return out, self.update(sampled, default=default)

    def draft(self, drafts: Mapping[str, Iterable[int]]) -> None:
        self.engine.update_draft_token_ids({k: tuple(v) for k, v in drafts.items()})

    def req(self, request_id: str) -> RequestSummary:
        return self.engine.summary().requests[request_id]

    def ct(self, request_id: str) -> tuple[int, int]:
        r = self.req(request_id)
        return r.num_computed_tokens, r.num_tokens

    def num_free_blocks(self) -> int:
        return self.engine.summary().num_free_blocks

    def close(self) -> None:
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()


def new_blocks(out: SchedulerOutput) -> dict[str, tuple[tuple[int, ...], int]]:
    """Each admission's block ids and prefix hit (its num_computed_tokens before the advance)."""
    return {n.req_id: (tuple(n.block_ids), n.num_computed_tokens) for n in out.scheduled_new_reqs}


def prompt(*runs: tuple[int, int]) -> tuple[int, ...]:
    """A prompt from (token, count) runs, e.g. prompt((7, 48), (8, 5)): a shared prefix and a suffix."""
    return tuple(t for token, count in runs for t in [token] * count)
