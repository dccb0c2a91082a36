"""The workload format: what any engine is driven by (schema: `workload.schema.json`).

A workload is everything an engine's run depends on: the config, the
requests with the step at which each arrives, the fake model's planted
samples, and aborts. Two engines given the same workload must produce the
same trace; that is the whole premise of the conformance harness.

Beyond the schema, `Workload.from_json` applies what vLLM checks before a
request reaches the scheduler (`vllm/v1/engine/input_processor.py:InputProcessor._validate_prompt_len (574-602)`): a prompt must be
shorter than `max_model_len` (a generate prompt of exactly L is rejected), and
`min_tokens <= max_tokens` (SamplingParams).

`Workload.load`, which reads a workload a user is about to run, also refuses
one that could only idle (`check_runnable`). Workloads embedded in traces and
counterexamples are records of runs and are not judged again: the shrinker
cuts `max_steps` below late arrivals (the engines must agree there too). The
campaign families draw only workloads this rule accepts
(`conformance/workloads/families.py:_runnable` grows a pool to the largest prompt).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .config import SchedulerConfig
from .controls import Control
from .errors import SpecError
from .jsonio import read_json, validate
from .request import Request, RequestStatus
from .versions import holds

WORKLOAD_VERSION = 1
FINISHED_ABORTED = RequestStatus.FINISHED_ABORTED
DEFAULT_FILLER_TOKEN_ID = 7
DEFAULT_MAX_STEPS = 10_000


@dataclass(frozen=True)
class Grammar:
    """Structured output: when a request's grammar finishes compiling, and whether it fails.

    vLLM compiles a grammar in a thread pool while the engine steps (vllm/v1/structured_output/__init__.py:
    StructuredOutputManager.grammar_init), and the scheduler looks at the compile's future at each schedule()
    that reaches the request. The workload fixes the step before whose schedule() the future is done, so every
    engine sees the same world: `ready_step` (at or after the arrival), and `fails` for a grammar that does not
    compile (the scheduler then finishes the request with FINISHED_ERROR in the step's update).
    """

    ready_step: int
    fails: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"ready_step": self.ready_step, "fails": self.fails}


@dataclass(frozen=True)
class WorkloadRequest:
    request: Request
    arrival_step: int = 0
    output_token_ids: tuple[int, ...] = ()  # planted samples, in order
    # Speculative decoding: (num_drafts, num_accepted) per proposal, in order (spec/engine.py).
    spec_proposals: tuple[tuple[int, int], ...] = ()
    grammar: Grammar | None = None  # structured output: `request.structured_output` is set exactly when this is

    def __post_init__(self) -> None:
        if (self.grammar is not None) != self.request.structured_output:
            object.__setattr__(
                self, "request", dataclasses.replace(self.request, structured_output=self.grammar is not None)
            )

    @property
    def request_id(self) -> str:
        return self.request.request_id


@dataclass(frozen=True)
class Abort:
    """A client's abort. Before the step's schedule() (the engine's input queue), or, `mid_step`, after the model
    ran and before update_from_output(): EngineCore drains its aborts queue there, so an abort that arrives while
    the model runs lands between a step's schedule and its update (vllm/v1/engine/core.py:EngineCore.step, and
    `step_with_batch_queue` before the oldest output's update; every release from 0.28.0)."""

    step: int
    request_id: str
    mid_step: bool = False
    # The status the request finishes with (`Scheduler.finish_requests(ids, status)`): FINISHED_ABORTED, as the engine
    # core's aborts; another finished status is a caller's that finishes requests from outside, as vLLM's own tests
    # do, and reaches an engine by its optional `finish_request`.
    status: RequestStatus = RequestStatus.FINISHED_ABORTED


@dataclass(frozen=True)
class Workload:
    config: SchedulerConfig
    requests: tuple[WorkloadRequest, ...]
    aborts: tuple[Abort, ...] = ()
    name: str = ""
    description: str = ""
    max_steps: int = DEFAULT_MAX_STEPS
    filler_token_id: int = DEFAULT_FILLER_TOKEN_ID
    # The prefill cadence of a data-parallel engine: the steps whose schedule() its DP engine core calls with
    # `throttle_prefills=True` (vllm/v1/engine/core.py:DPEngineCoreProc._should_throttle_prefills: off the cadence
    # of its step counter, which all ranks share; vLLM's own tests call it so on any scheduler). Ascending, once each.
    throttle_prefills: tuple[int, ...] = ()
    # The engine's calls outside schedule(), by step (`spec.controls`): applied after the step's arrivals, aborts and
    # grammars, in this order. Steps ascending; several at one step apply in turn.
    controls: tuple[Control, ...] = ()
    _by_id: dict[str, WorkloadRequest] = field(init=False, repr=False, compare=False)
    # The engine loop asks for each step's arrivals and aborts: indexed once, so a step
    # costs what arrives in it, not a scan of every request (50k requests, 12k steps).
    _arrivals: dict[int, tuple[Request, ...]] = field(init=False, repr=False, compare=False)
    _aborts: dict[int, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    _mid_step_aborts: dict[int, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    _abort_status: dict[tuple[int, bool, str], RequestStatus] = field(init=False, repr=False, compare=False)
    _grammars: dict[int, tuple[tuple[str, bool], ...]] = field(init=False, repr=False, compare=False)
    _throttled: frozenset[int] = field(init=False, repr=False, compare=False)
    _controls: dict[int, tuple[Control, ...]] = field(init=False, repr=False, compare=False)
    last_event_step: int = field(init=False, repr=False, compare=False)  # the last arrival, abort, grammar or control

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {r.request_id: r for r in self.requests})
        _check(self)
        arrivals: dict[int, list[Request]] = {}
        for r in self.requests:
            arrivals.setdefault(r.arrival_step, []).append(r.request)
        aborts: dict[int, list[str]] = {}
        mid_step: dict[int, list[str]] = {}
        for a in self.aborts:
            (mid_step if a.mid_step else aborts).setdefault(a.step, []).append(a.request_id)
        object.__setattr__(self, "_arrivals", {k: tuple(v) for k, v in arrivals.items()})
        object.__setattr__(self, "_aborts", {k: tuple(v) for k, v in aborts.items()})
        object.__setattr__(self, "_mid_step_aborts", {k: tuple(v) for k, v in mid_step.items()})
        statuses = {(a.step, a.mid_step, a.request_id): a.status for a in self.aborts}
        object.__setattr__(self, "_abort_status", {k: v for k, v in statuses.items() if v != FINISHED_ABORTED})
        grammars: dict[int, list[tuple[str, bool]]] = {}
        for r in self.requests:
            if r.grammar is not None:
                grammars.setdefault(r.grammar.ready_step, []).append((r.request_id, not r.grammar.fails))
        object.__setattr__(self, "_grammars", {k: tuple(v) for k, v in grammars.items()})
        object.__setattr__(self, "_throttled", frozenset(self.throttle_prefills))
        controls: dict[int, list[Control]] = {}
        for c in self.controls:
            controls.setdefault(c.step, []).append(c)
        object.__setattr__(self, "_controls", {k: tuple(v) for k, v in controls.items()})
        last = max((*arrivals, *aborts, *mid_step, *grammars, *controls), default=0)
        object.__setattr__(self, "last_event_step", last)

    def request(self, request_id: str) -> WorkloadRequest:
        return self._by_id[request_id]

    def planted(self, request_id: str) -> tuple[int, ...]:
        return self._by_id[request_id].output_token_ids

    def sampled_token(self, request_id: str, index: int) -> int:
        """The fake model's `index`-th sample for a request (0-based)."""
        planted = self._by_id[request_id].output_token_ids
        return planted[index] if index < len(planted) else self.filler_token_id

    def spec_proposal(self, request_id: str, index: int) -> tuple[int, int]:
        """The drafter's `index`-th proposal for a request: (num_drafts, num_accepted); (0, 0) once they run out."""
        proposals = self._by_id[request_id].spec_proposals
        return proposals[index] if index < len(proposals) else (0, 0)

    def arrivals_at(self, step: int) -> list[Request]:
        """The requests arriving at `step`, in workload order."""
        return list(self._arrivals.get(step, ()))

    def aborts_at(self, step: int) -> list[str]:
        """The aborts applied before `step`'s schedule()."""
        return list(self._aborts.get(step, ()))

    def mid_step_aborts_at(self, step: int) -> list[str]:
        """The aborts applied after `step`'s model ran, before its update (`Abort.mid_step`)."""
        return list(self._mid_step_aborts.get(step, ()))

    def abort_status(self, step: int, request_id: str, mid_step: bool = False) -> RequestStatus:
        """The status the abort of `request_id` at `step` finishes it with (`Abort.status`)."""
        return self._abort_status.get((step, mid_step, request_id), FINISHED_ABORTED)

    @property
    def finishes_from_outside(self) -> bool:
        """Whether an abort finishes a request with a status other than aborted (`Abort.status`)."""
        return bool(self._abort_status)

    def grammars_at(self, step: int) -> list[tuple[str, bool]]:
        """The grammars whose compile finishes before `step`'s schedule(): (request id, compiled), in workload order."""
        return list(self._grammars.get(step, ()))

    def throttled_at(self, step: int) -> bool:
        """Whether the DP engine core calls `step`'s schedule() with `throttle_prefills=True`."""
        return step in self._throttled

    def controls_at(self, step: int) -> list[Control]:
        """The engine's calls outside schedule() before `step`'s schedule(), in workload order."""
        return list(self._controls.get(step, ()))

    def replace(self, **changes: Any) -> Workload:
        keys = (
            "config",
            "requests",
            "aborts",
            "name",
            "description",
            "max_steps",
            "filler_token_id",
            "throttle_prefills",
            "controls",
        )
        fields = {k: getattr(self, k) for k in keys}
        fields.update(changes)
        return Workload(**fields)

    # ---- JSON -----------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "version": WORKLOAD_VERSION,
            "name": self.name,
            "description": self.description,
            "config": self.config.to_dict(),
            "max_steps": self.max_steps,
            "filler_token_id": self.filler_token_id,
            "requests": [_request_to_json(r) for r in self.requests],
            "aborts": [
                {
                    "step": a.step,
                    "request_id": a.request_id,
                    **({"mid_step": True} if a.mid_step else {}),
                    **({"status": a.status.name} if a.status != FINISHED_ABORTED else {}),
                }
                for a in self.aborts
            ],
            **({"throttle_prefills": list(self.throttle_prefills)} if self.throttle_prefills else {}),
            **({"controls": [c.to_json() for c in self.controls]} if self.controls else {}),
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "workload") -> Workload:
        check_numbers(data, where)
        validate(_for_schema(data), "workload", where)
        config = SchedulerConfig.from_dict(data["config"], f"{where}.config")
        requests = tuple(_request_from_json(r, i) for i, r in enumerate(data["requests"]))
        aborts = tuple(
            Abort(
                a["step"], a["request_id"], a.get("mid_step", False), RequestStatus[a.get("status", "FINISHED_ABORTED")]
            )
            for a in data.get("aborts", [])
        )
        try:
            controls = tuple(
                Control.from_json(c, f"workload.controls[{i}]") for i, c in enumerate(data.get("controls", []))
            )
            return cls(
                config=config,
                requests=requests,
                aborts=aborts,
                name=data.get("name", ""),
                description=data.get("description", ""),
                max_steps=data.get("max_steps", DEFAULT_MAX_STEPS),
                filler_token_id=data.get("filler_token_id", DEFAULT_FILLER_TOKEN_ID),
                throttle_prefills=tuple(data.get("throttle_prefills", ())),
                controls=controls,
            )
        except SpecError as e:
            raise SpecError(e.where.replace("workload", where, 1), e.value, e.why) from None

    @classmethod
    def load(cls, path: str) -> Workload:
        """A workload file a user is about to run: one that could only idle is refused here."""
        data = read_json(path)
        kind = file_kind(data)
        if kind in ("trace", "counterexample"):
            hint = "check it with `schedspec check`" if kind == "trace" else "replay it with `schedspec replay`"
            raise SpecError(path, _keys(data), f"is a {kind}, not a workload; {hint}")
        workload = cls.from_json(data, where=f"{path}:workload")
        check_runnable(workload, where=f"{path}:workload")
        return workload


_TOKEN_ARRAYS = ("prompt_token_ids", "output_token_ids", "stop_token_ids")


def _for_schema(data: Any) -> Any:
    """`data` with each token array the schema would accept cut to one token, for `validate`.

    jsonschema spends microseconds per item: 25 s on a 50,000-request
    workload, mostly prompt tokens. A non-empty array of plain non-negative
    ints cannot fail (`integer`, `minimum: 0`); anything else is left to the
    schema, so the errors are exactly the schema's.
    """
    if not isinstance(data, dict) or not isinstance(data.get("requests"), list):
        return data
    requests = []
    for r in data["requests"]:
        if isinstance(r, dict):
            r = {k: [0] if k in _TOKEN_ARRAYS and _plain_tokens(v) else v for k, v in r.items()}
        requests.append(r)
    return {**data, "requests": requests}


def _plain_tokens(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(type(t) is int and t >= 0 for t in v)


def _request_to_json(r: WorkloadRequest) -> dict[str, Any]:
    q = r.request
    return {
        "request_id": q.request_id,
        "arrival_step": r.arrival_step,
        "prompt_token_ids": list(q.prompt_token_ids),
        "max_tokens": q.max_tokens,
        "min_tokens": q.min_tokens,
        "eos_token_id": q.eos_token_id,
        "ignore_eos": q.ignore_eos,
        "stop_token_ids": list(q.stop_token_ids),
        "priority": q.priority,
        "arrival_time": q.arrival_time,
        **({"lora_int_id": q.lora_int_id} if q.lora_int_id else {}),
        **({"skip_reading_prefix_cache": True} if q.skip_reading_prefix_cache else {}),
        "output_token_ids": list(r.output_token_ids),
        **({"spec_proposals": [list(p) for p in r.spec_proposals]} if r.spec_proposals else {}),
        **({"grammar": r.grammar.to_json()} if r.grammar is not None else {}),
    }


def _request_from_json(d: Mapping[str, Any], index: int) -> WorkloadRequest:
    if d.get("structured_output") and "grammar" not in d:
        raise SpecError(
            f"workload.requests[{index}].structured_output",
            True,
            'needs a grammar: {"ready_step": N} says when it compiles',
        )
    request = Request.from_json(d, default_arrival_time=index)
    return WorkloadRequest(
        request,
        d.get("arrival_step", 0),
        tuple(d.get("output_token_ids", ())),
        tuple((p[0], p[1]) for p in d.get("spec_proposals", ())),
        Grammar(d["grammar"]["ready_step"], d["grammar"].get("fails", False)) if "grammar" in d else None,
    )


def _check_pooling_request(r: WorkloadRequest, here: str) -> None:
    """A pooling model's request has PoolingParams and no SamplingParams: max_tokens 1 (vllm/v1/request.py:
    Request.__init__), and nothing that only sampling reads."""
    q = r.request
    if q.max_tokens != 1:
        raise SpecError(f"{here}.max_tokens", q.max_tokens, "must be 1 under a pooling runner (PoolingParams)")
    if q.structured_output:
        raise SpecError(f"{here}.grammar", r.grammar, "must be absent under a pooling runner: a grammar needs sampling")
    if r.output_token_ids:
        raise SpecError(
            f"{here}.output_token_ids",
            list(r.output_token_ids),
            "must be empty under a pooling runner: it samples none",
        )


def _check(w: Workload) -> None:
    """The rules a schema cannot say: unique ids, known abort targets, vLLM's input validation."""
    L = w.config.max_model_len
    steps = w.throttle_prefills
    for i, s in enumerate(steps):
        if not isinstance(s, int) or isinstance(s, bool) or s < 0 or (i and s <= steps[i - 1]):
            raise SpecError(f"workload.throttle_prefills[{i}]", s, "must be a step >= 0, ascending, each once")
    seen: set[str] = set()
    for i, r in enumerate(w.requests):
        q, here = r.request, f"workload.requests[{i}]"
        if q.request_id in seen:
            raise SpecError(f"{here}.request_id", q.request_id, "is used by an earlier request")
        seen.add(q.request_id)
        if not q.prompt_token_ids:
            raise SpecError(f"{here}.prompt_token_ids", [], "must not be empty")
        if not math.isfinite(q.arrival_time):  # JSON's NaN and Infinity parse; no order or tie-break survives them
            raise SpecError(f"{here}.arrival_time", q.arrival_time, "must be a finite number")
        pooling = w.config.runner == "pooling"
        if q.num_prompt_tokens > L or (q.num_prompt_tokens == L and not pooling):
            raise SpecError(
                f"{here}.prompt_token_ids",
                f"<{q.num_prompt_tokens} tokens>",
                f"must be at most max_model_len ({L}), and shorter under a generate runner; vLLM rejects a "
                "generate prompt of L or more",
            )
        if pooling:
            _check_pooling_request(r, here)
        if q.max_tokens < 1:
            raise SpecError(f"{here}.max_tokens", q.max_tokens, "must be >= 1")
        if not 0 <= q.min_tokens <= q.max_tokens:
            raise SpecError(f"{here}.min_tokens", q.min_tokens, f"must be in [0, max_tokens={q.max_tokens}]")
        if r.arrival_step < 0:
            raise SpecError(f"{here}.arrival_step", r.arrival_step, "must be >= 0")
        if q.lora_int_id and w.config.max_loras is None:
            raise SpecError(
                f"{here}.lora_int_id", q.lora_int_id, "needs config.max_loras: vLLM refuses a LoRA request without LoRA"
            )
        if r.grammar is not None and r.grammar.ready_step < r.arrival_step:
            raise SpecError(
                f"{here}.grammar.ready_step",
                r.grammar.ready_step,
                f"must be >= arrival_step ({r.arrival_step}): the compile starts when the request arrives",
            )
        k = w.config.num_speculative_tokens
        for j, (num_drafts, num_accepted) in enumerate(r.spec_proposals):
            if k == 0:
                raise SpecError(
                    f"{here}.spec_proposals", [num_drafts, num_accepted], "needs config.num_speculative_tokens > 0"
                )
            if not 0 <= num_drafts <= k:
                raise SpecError(
                    f"{here}.spec_proposals[{j}][0]", num_drafts, f"must be in [0, num_speculative_tokens={k}]"
                )
            if not 0 <= num_accepted <= num_drafts:
                raise SpecError(
                    f"{here}.spec_proposals[{j}][1]", num_accepted, f"must be in [0, num_drafts={num_drafts}]"
                )
    for i, a in enumerate(w.aborts):
        if a.request_id not in seen:
            raise SpecError(f"workload.aborts[{i}].request_id", a.request_id, "names no request in this workload")
        if not (isinstance(a.status, RequestStatus) and a.status.is_finished):
            raise SpecError(f"workload.aborts[{i}].status", a.status, "must be a finished status")
        if a.step < 0:
            raise SpecError(f"workload.aborts[{i}].step", a.step, "must be >= 0")
    for i, c in enumerate(w.controls):
        if c.step < 0 or (i and c.step < w.controls[i - 1].step):
            raise SpecError(f"workload.controls[{i}].step", c.step, "must be a step >= 0, in ascending order")
        if c.call == "release_kv_cache_memory" and not holds("release-kv-cache-memory", w.config.vllm_version):
            raise SpecError(
                f"workload.controls[{i}].call",
                c.call,
                f"needs vLLM 0.31.0 or later (config.vllm_version is {w.config.vllm_version})",
            )
    if w.max_steps < 1:
        raise SpecError("workload.max_steps", w.max_steps, "must be >= 1")


def file_kind(data: Any) -> str | None:
    """Which schedspec file this is, by its required keys: to name a file handed to the wrong command."""
    if not isinstance(data, dict):
        return None
    if data.get("kind") == "divergence":
        return "counterexample"
    if {"steps", "workload", "engine"} <= data.keys():
        return "trace"
    if {"config", "requests"} <= data.keys():
        return "workload"
    return None


def _keys(data: dict[str, Any]) -> str:
    return "keys " + ", ".join(data)


def check_runnable(w: Workload, where: str = "workload") -> None:
    """Refuse a workload that would idle to `max_steps` because of how it is written, not how vLLM schedules.

    * An arrival or abort at or after `max_steps` never happens (steps run
      0 .. max_steps - 1), and the loop cannot drain before it.
    * A prompt needing more blocks than the pool (less the null block) can
      never be computed: a block table holds distinct blocks, hits included.
      With the full-sequence gate (the default) or without chunked prefill
      it is never admitted, even alone (no watermark then); otherwise it is
      admitted in chunks and preempts itself once the pool is full, forever.
    * Without chunked prefill, prefix caching or a threshold a prompt is
      admitted only whole, so one above the token budget never is.

    A request the workload aborts (at or after its arrival) is exempt. vLLM's
    own livelocks are modelled, not refused: D1 (the prompt fits, prompt plus
    outputs does not), the spec-decode padding livelocks, a pool that fits
    each request alone but not all at once.
    """
    c = w.config
    for i, a in enumerate(w.aborts):
        if a.step >= w.max_steps:
            raise SpecError(
                f"{where}.aborts[{i}].step",
                a.step,
                f"is at or past max_steps ({w.max_steps}), so the abort never happens",
            )
    aborted = {a.request_id for a in w.aborts if a.step >= w.request(a.request_id).arrival_step}
    budget = min(c.token_budget, c.max_num_batched_tokens)
    for i, r in enumerate(w.requests):
        here = f"{where}.requests[{i}]"
        if r.arrival_step >= w.max_steps:
            raise SpecError(
                f"{here}.arrival_step",
                r.arrival_step,
                f"is at or past max_steps ({w.max_steps}), so the request never arrives",
            )
        if r.request_id in aborted:
            continue
        if r.grammar is not None and r.grammar.ready_step >= w.max_steps:
            raise SpecError(
                f"{here}.grammar.ready_step",
                r.grammar.ready_step,
                f"is at or past max_steps ({w.max_steps}), so the request waits for its grammar to the end",
            )
        num_prompt_tokens = r.request.num_prompt_tokens
        num_blocks = -(-num_prompt_tokens // c.block_size)
        if num_blocks > c.num_usable_blocks:
            never = (
                "it is never admitted"
                if c.scheduler_reserve_full_isl or not c.enable_chunked_prefill
                else "its prefill never completes"
            )
            raise SpecError(
                f"{here}.prompt_token_ids",
                f"<{num_prompt_tokens} tokens>",
                f"needs {num_blocks} KV blocks of {c.block_size} tokens but the pool has "
                f"{c.num_usable_blocks} (num_gpu_blocks less the null block), so {never}",
            )
        if (
            not c.enable_chunked_prefill
            and not c.enable_prefix_caching
            and c.long_prefill_token_threshold == 0
            and num_prompt_tokens > budget
        ):
            raise SpecError(
                f"{here}.prompt_token_ids",
                f"<{num_prompt_tokens} tokens>",
                f"is longer than the token budget ({budget}) with chunked prefill off, so it is never admitted",
            )


INT64 = range(-(2**63), 2**63)


def check_numbers(data: Any, where: str) -> None:
    """Every number in a workload is finite, and every integer fits 64 bits, as every engine holds it.

    JSON's NaN and Infinity parse in Python; a NaN compares false with
    everything, so no order or bound survives it. An integer past 64 bits
    is no token count, block id or step any engine can hold (vLLM and the
    torch engine keep them in int64 tensors). Both are refused here, naming
    the field, before any rule sees them.
    """
    if isinstance(data, float) and not math.isfinite(data):
        raise SpecError(where, data, "must be a finite number")
    if isinstance(data, int) and not isinstance(data, bool) and data not in INT64:
        raise SpecError(where, data, "is beyond a 64-bit integer, which no engine holds")
    if isinstance(data, dict):
        for k, v in data.items():
            check_numbers(v, f"{where}.{k}")
    elif isinstance(data, list):
        if data and all(type(v) is int for v in data):  # a prompt: its bounds in C, not an element at a time
            if INT64.start <= min(data) and max(data) < INT64.stop:
                return
        for i, v in enumerate(data):
            check_numbers(v, f"{where}[{i}]")
