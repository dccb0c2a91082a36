"""`TorchEngine`: one scheduler instance on the torch engine, behind the `spec.engine.Engine` protocol.

It is the batched engine with B = 1, so lock-step certification
(`schedspec certify --engine torch` in per-workload mode, `replay`,
shrinking) exercises exactly the tensor programs the batched runner uses.
Ids, each request's output tokens and the finished records live in Python
glue; every decision is made by `step.schedule`, `update.update_from_output`
and `update.abort`.

Under async scheduling `schedule()` runs again before the previous output
is absorbed, so scheduled steps wait in a FIFO and `update_from_output`
takes the oldest (and checks that the caller names it). Drafts come in
through `update_draft_token_ids`.

The device is `device`, else `$SCHEDSPEC_TORCH_DEVICE`, else CUDA when
available, else the CPU (`device.py`). Slots are never reused: capacity
doubles as requests are added (`BatchState.grow_slots`).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Concatenate, ParamSpec, TypeVar

import torch

from ..spec.config import SchedulerConfig
from ..spec.engine import DECLARED_FEATURES, gc_paused
from ..spec.output import ModelRunnerOutput, SchedulerOutput
from ..spec.request import Request, RequestStatus
from ..spec.trace import FinishedRequest, StateSummary
from .columnar import DeferredSchedulerOutput, OutputTokens, SampledTokens
from .controls import reset_prefix_cache
from .device import cpu_threads, pick_device
from .fake_model import update_draft_token_ids
from .load import Entry, load, priority_ranks
from .materialize import STATUS, columns, summaries
from .state import BIG, BatchState
from .step import StepOut, schedule
from .update import abort, update_from_output

ENGINE_NAME = "torch"
Args = ParamSpec("Args")
Result = TypeVar("Result")


def _threads(
    method: Callable[Concatenate[TorchEngine, Args], Result],
) -> Callable[Concatenate[TorchEngine, Args], Result]:
    """Run an engine method under the CPU thread setting of `device.cpu_threads`."""

    @functools.wraps(method)
    def wrapper(self: TorchEngine, /, *args: Args.args, **kwargs: Args.kwargs) -> Result:
        with cpu_threads(self.device):
            return method(self, *args, **kwargs)

    return wrapper


def _widen(t: torch.Tensor, R: int, fill: int) -> torch.Tensor:
    """A step's [B, R'] tensor padded to the state's R >= R' slots; the new slots were not scheduled."""
    if t.shape[1] == R:
        return t
    return torch.cat([t, torch.full((t.shape[0], R - t.shape[1]), fill, dtype=t.dtype, device=t.device)], 1)


class TorchEngine:
    name = ENGINE_NAME
    features = frozenset(DECLARED_FEATURES)

    def __init__(self, config: SchedulerConfig, device: str | torch.device | None = None) -> None:
        self.config = config
        self.device = pick_device(device)
        self.st = BatchState([config], 16, self.device, throttled=True)  # a call may throttle: keep the cadence
        self.ids: list[str] = []  # slot -> request id
        self.requests: list[Request] = []  # slot -> request
        self.slot: dict[str, int] = {}
        self.outputs = OutputTokens(self.device)  # each slot's output tokens, kept as tensors
        self.live: set[str] = set()
        self._pending: deque[tuple[StepOut, DeferredSchedulerOutput]] = deque()

    # ---- requests in and out ----------------------------------------------------
    def add_request(self, request: Request) -> None:
        self.add_requests([request])

    @_threads
    def add_requests(self, requests: Iterable[Request]) -> None:
        """`add_request` for many at once, in order (one bulk write instead of one per request)."""
        requests = list(requests)
        if not requests:
            return
        first = len(self.ids)
        entries = [Entry(0, first + i, q, first + i) for i, q in enumerate(requests)]
        for e in entries:
            self.ids.append(e.request.request_id)
            self.requests.append(e.request)
            self.slot[e.request.request_id] = e.slot
            self.live.add(e.request.request_id)
        load(self.st, entries)
        if self.config.policy == "priority":
            ranks = torch.tensor(priority_ranks(self.requests), dtype=torch.int64, device=self.device)
            self.st.prio_rank[0, : len(ranks)] = ranks
        mask = torch.zeros_like(self.st.fin_pending)
        mask[0, first : first + len(requests)] = True
        self.st.arrive(mask)

    def abort_request(self, request_id: str) -> FinishedRequest | None:
        return self.finish_request(request_id, RequestStatus.FINISHED_ABORTED)

    @_threads
    def finish_request(self, request_id: str, status: RequestStatus) -> FinishedRequest | None:
        """An abort, or a finish from outside with another finished status (`Abort.status`)."""
        if request_id not in self.live:
            return None
        slot = torch.tensor([[self.slot[request_id]]], dtype=torch.int64, device=self.device)
        (tokens,) = self.outputs.of(slot[0], self.st.num_out[0, slot[0]])
        hit = abort(self.st, slot, torch.ones_like(slot, dtype=torch.bool), int(status))
        if not bool(hit.all()):  # the glue thought it live; the state disagrees
            raise RuntimeError(f"abort of {request_id!r}: the request is not live in the tensor state")
        self.live.discard(request_id)
        return FinishedRequest(status, tokens)

    # ---- the step ----------------------------------------------------------------
    @_threads
    @gc_paused  # as the reference's: the step builds no cycles (`spec.engine.gc_paused`)
    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        throttle = torch.tensor([throttle_prefills], device=self.st.device) if throttle_prefills else None
        out = schedule(self.st, throttle=throttle)
        result = DeferredSchedulerOutput.of(columns(self.st, out), self.ids)  # objects only when read (columnar.py)
        # Async scheduling schedules again before absorbing: outputs are absorbed oldest first.
        self._pending.append((out, result))
        return result

    @_threads
    def reset_prefix_cache(self, reset_running_requests: bool) -> bool:
        """vLLM's `Scheduler.reset_prefix_cache` between steps (`controls.py`)."""
        asked = torch.tensor([reset_running_requests], device=self.st.device)
        return bool(reset_prefix_cache(self.st, asked)[0])

    def set_pause_state(self, pause_state: int) -> None:
        """vLLM's `Scheduler.set_pause_state`: the next schedule() reads it."""
        self.st.pause = torch.full_like(self.st.pause, int(pause_state))

    @_threads
    def summary(self) -> StateSummary:
        return summaries(self.st, [self.ids])[0]

    @_threads
    def sampled_tokens(self, model_output: ModelRunnerOutput) -> SampledTokens:
        """The model's answer to a step, as tensors over this engine's slots.

        It reads the answer alone, never the step's output, so a deferred output stays unbuilt. An answer for a
        request the step did not schedule is ignored (`update_from_output` masks it), as vLLM's update loop,
        which walks the scheduled requests, never looks it up.
        """
        G = 1 + self.st.kmax
        rows = [
            (self.slot[rid], tuple(t)) for rid, t in model_output.sampled_token_ids.items() if t and rid in self.slot
        ]
        if any(len(t) > G for _, t in rows):
            raise ValueError(f"more than 1 + num_speculative_tokens = {G} sampled tokens for a request")
        tokens = torch.zeros((self.st.R, G), dtype=torch.int64)
        count = torch.zeros(self.st.R, dtype=torch.int64)
        if rows:  # one write per tensor
            at = [(slot, j, x) for slot, t in rows for j, x in enumerate(t)]
            s_, j_, x_ = (torch.tensor(c, dtype=torch.int64) for c in zip(*at))
            tokens[s_, j_] = x_
            count[torch.tensor([r[0] for r in rows])] = torch.tensor([len(r[1]) for r in rows])
        pooled = None
        if model_output.pooler_output:
            pooled = torch.zeros(self.st.R, dtype=torch.bool)
            pooled[[self.slot[rid] for rid in model_output.pooler_output if rid in self.slot]] = True
            pooled = pooled.to(self.device)
        return SampledTokens(tokens.to(self.device), count.to(self.device), pooled)

    @_threads
    @gc_paused
    def update_from_output(
        self, output: SchedulerOutput, model_output: ModelRunnerOutput | SampledTokens
    ) -> dict[str, FinishedRequest]:
        """`model_output` as the spec's `ModelRunnerOutput`, or already as tensors (`SampledTokens`)."""
        if not isinstance(model_output, SampledTokens):
            model_output = self.sampled_tokens(model_output)
        tokens, G = model_output.tokens, 1 + self.st.kmax
        if tokens.dim() != 2 or tokens.shape[1] != G or tokens.shape[0] > self.st.R:
            raise ValueError(f"SampledTokens.tokens: shape {tuple(tokens.shape)}, expected [R <= {self.st.R}, {G}]")
        if model_output.count.shape != tokens.shape[:1]:
            raise ValueError(f"SampledTokens.count: shape {tuple(model_output.count.shape)}, expected [{len(tokens)}]")
        if not self._pending:
            raise RuntimeError("update_from_output without a preceding schedule")
        out, scheduled = self._pending.popleft()
        if output is not scheduled and list(output.num_scheduled_tokens) != list(scheduled.num_scheduled_tokens):
            raise RuntimeError("update_from_output: the output is not the oldest one schedule() returned")
        # A request added while this step was in flight may have grown the slots since `schedule()`.
        R = self.st.R
        num_gen = _widen(model_output.count[None], R, 0)
        if tokens.shape[0] < R:
            tokens = torch.cat([tokens, tokens.new_zeros((R - tokens.shape[0], tokens.shape[1]))])
        gen = tokens[None]
        n_sched, sched_key, n_spec = _widen(out.n_sched, R, 0), _widen(out.sched_key, R, BIG), _widen(out.n_spec, R, 0)
        num_gen = torch.where(n_sched > 0, num_gen, 0)  # only the scheduled requests' answers count
        before = self.st.num_out[0]  # the update replaces `num_out`, never writes into it (as `batch.py` relies on)
        pooled = None
        if model_output.pooled is not None:
            pooled = (_widen(model_output.pooled[None].long(), R, 0) > 0) & (n_sched > 0)
        stopped = update_from_output(self.st, n_sched, sched_key, n_spec, gen, num_gen, pooled=pooled)
        self.outputs.record(before, gen[0])
        count = int(stopped.sum())
        if count == 0:
            return {}
        # num_scheduled_tokens order, as vLLM's loop finds them; a failed grammar (never scheduled) after them
        key = torch.where(stopped, torch.clamp(sched_key, max=BIG - 1), torch.full_like(sched_key, BIG))[0]
        order = key.argsort(stable=True)[:count]
        statuses = self.st.status[0, order].tolist()
        finished: dict[str, FinishedRequest] = {}
        kept = self.outputs.of(order, self.st.num_out[0, order])
        for slot, status, output_token_ids in zip(order.tolist(), statuses, kept):
            rid = self.ids[slot]
            self.live.discard(rid)
            finished[rid] = FinishedRequest(STATUS[status], output_token_ids)
        return finished

    @_threads
    def grammar_compiled(self, request_id: str, compiled: bool) -> None:
        """Structured output: the request's grammar finished compiling, or failed (`BatchState.grammars_compiled`)."""
        if request_id not in self.live:
            return
        mask = torch.zeros_like(self.st.grammar_error)
        mask[0, self.slot[request_id]] = True
        self.st.grammars_compiled(mask, torch.full_like(mask, not compiled))

    @_threads
    def update_draft_token_ids(self, draft_token_ids: Mapping[str, Sequence[int]]) -> None:
        """The drafter's proposals after a sync step
        (vllm/v1/core/sched/scheduler.py:Scheduler.update_draft_token_ids)."""
        known = [(self.slot[rid], tuple(d)) for rid, d in draft_token_ids.items() if rid in self.slot]
        if not known:
            return
        K = self.st.kmax
        if any(len(d) > K for _, d in known):
            raise ValueError(f"more than num_speculative_tokens = {K} drafts for a request")
        drafts = torch.zeros((1, self.st.R, K), dtype=torch.int64)
        count = torch.zeros((1, self.st.R), dtype=torch.int64)
        for slot, d in known:
            drafts[0, slot, : len(d)] = torch.tensor(d, dtype=torch.int64)
            count[0, slot] = len(d)
        update_draft_token_ids(self.st, drafts.to(self.device), count.to(self.device))
