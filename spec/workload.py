"""The workload format: what any engine is driven by (schema: `workload.schema.json`).

A workload is everything an engine's run depends on: the config, the
requests with the step at which each arrives, the fake model's planted
samples, and aborts. Two engines given the same workload must produce the
same trace; that is the whole premise of the conformance harness.

Beyond the schema, `Workload.from_json` applies what vLLM checks before a
request reaches the scheduler (`input_processor.py:584-606`): a prompt must be
shorter than `max_model_len` (a generate prompt of exactly L is rejected), and
`min_tokens <= max_tokens` (SamplingParams).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .config import SchedulerConfig
from .errors import SpecError
from .jsonio import read_json, validate
from .request import Request

WORKLOAD_VERSION = 1
DEFAULT_FILLER_TOKEN_ID = 7
DEFAULT_MAX_STEPS = 10_000


@dataclass(frozen=True)
class WorkloadRequest:
    request: Request
    arrival_step: int = 0
    output_token_ids: tuple[int, ...] = ()  # planted samples, in order
    # Speculative decoding: (num_drafts, num_accepted) per proposal, in order (spec/engine.py).
    spec_proposals: tuple[tuple[int, int], ...] = ()

    @property
    def request_id(self) -> str:
        return self.request.request_id


@dataclass(frozen=True)
class Abort:
    step: int
    request_id: str


@dataclass(frozen=True)
class Workload:
    config: SchedulerConfig
    requests: tuple[WorkloadRequest, ...]
    aborts: tuple[Abort, ...] = ()
    name: str = ""
    description: str = ""
    max_steps: int = DEFAULT_MAX_STEPS
    filler_token_id: int = DEFAULT_FILLER_TOKEN_ID
    _by_id: dict[str, WorkloadRequest] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {r.request_id: r for r in self.requests})
        _check(self)

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
        return [r.request for r in self.requests if r.arrival_step == step]

    def aborts_at(self, step: int) -> list[str]:
        return [a.request_id for a in self.aborts if a.step == step]

    @property
    def last_event_step(self) -> int:
        steps = [r.arrival_step for r in self.requests] + [a.step for a in self.aborts]
        return max(steps, default=0)

    def replace(self, **changes: Any) -> "Workload":
        fields = {k: getattr(self, k) for k in ("config", "requests", "aborts", "name", "description", "max_steps", "filler_token_id")}
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
            "aborts": [{"step": a.step, "request_id": a.request_id} for a in self.aborts],
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "workload") -> "Workload":
        validate(data, "workload", where)
        config = SchedulerConfig.from_dict(data["config"], f"{where}.config")
        requests = tuple(_request_from_json(r, i) for i, r in enumerate(data["requests"]))
        aborts = tuple(Abort(a["step"], a["request_id"]) for a in data.get("aborts", []))
        try:
            return cls(
                config=config,
                requests=requests,
                aborts=aborts,
                name=data.get("name", ""),
                description=data.get("description", ""),
                max_steps=data.get("max_steps", DEFAULT_MAX_STEPS),
                filler_token_id=data.get("filler_token_id", DEFAULT_FILLER_TOKEN_ID),
            )
        except SpecError as e:
            raise SpecError(e.where.replace("workload", where, 1), e.value, e.why) from None

    @classmethod
    def load(cls, path: str) -> "Workload":
        return cls.from_json(read_json(path), where=f"{path}:workload")


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
        "output_token_ids": list(r.output_token_ids),
        **({"spec_proposals": [list(p) for p in r.spec_proposals]} if r.spec_proposals else {}),
    }


def _request_from_json(d: Mapping[str, Any], index: int) -> WorkloadRequest:
    request = Request(
        request_id=d["request_id"],
        prompt_token_ids=tuple(d["prompt_token_ids"]),
        max_tokens=d["max_tokens"],
        min_tokens=d.get("min_tokens", 0),
        eos_token_id=d.get("eos_token_id"),
        ignore_eos=d.get("ignore_eos", False),
        stop_token_ids=tuple(d.get("stop_token_ids", ())),
        priority=d.get("priority", 0),
        arrival_time=float(d.get("arrival_time", index)),
    )
    return WorkloadRequest(request, d.get("arrival_step", 0), tuple(d.get("output_token_ids", ())),
                           tuple((p[0], p[1]) for p in d.get("spec_proposals", ())))


def _check(w: Workload) -> None:
    """The rules a schema cannot say: unique ids, known abort targets, vLLM's input validation."""
    L = w.config.max_model_len
    seen: set[str] = set()
    for i, r in enumerate(w.requests):
        q, here = r.request, f"workload.requests[{i}]"
        if q.request_id in seen:
            raise SpecError(f"{here}.request_id", q.request_id, "is used by an earlier request")
        seen.add(q.request_id)
        if not q.prompt_token_ids:
            raise SpecError(f"{here}.prompt_token_ids", [], "must not be empty")
        if q.num_prompt_tokens >= L:
            raise SpecError(f"{here}.prompt_token_ids", f"<{q.num_prompt_tokens} tokens>",
                            f"must be shorter than max_model_len ({L}); vLLM rejects a generate prompt of L or more")
        if q.max_tokens < 1:
            raise SpecError(f"{here}.max_tokens", q.max_tokens, "must be >= 1")
        if not 0 <= q.min_tokens <= q.max_tokens:
            raise SpecError(f"{here}.min_tokens", q.min_tokens, f"must be in [0, max_tokens={q.max_tokens}]")
        if r.arrival_step < 0:
            raise SpecError(f"{here}.arrival_step", r.arrival_step, "must be >= 0")
        k = w.config.num_speculative_tokens
        for j, (num_drafts, num_accepted) in enumerate(r.spec_proposals):
            if k == 0:
                raise SpecError(f"{here}.spec_proposals", [num_drafts, num_accepted],
                                "needs config.num_speculative_tokens > 0")
            if not 0 <= num_drafts <= k:
                raise SpecError(f"{here}.spec_proposals[{j}][0]", num_drafts, f"must be in [0, num_speculative_tokens={k}]")
            if not 0 <= num_accepted <= num_drafts:
                raise SpecError(f"{here}.spec_proposals[{j}][1]", num_accepted, f"must be in [0, num_drafts={num_drafts}]")
    for i, a in enumerate(w.aborts):
        if a.request_id not in seen:
            raise SpecError(f"workload.aborts[{i}].request_id", a.request_id, "names no request in this workload")
        if a.step < 0:
            raise SpecError(f"workload.aborts[{i}].step", a.step, "must be >= 0")
    if w.max_steps < 1:
        raise SpecError("workload.max_steps", w.max_steps, "must be >= 1")
