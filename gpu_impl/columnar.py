"""The torch engine's step at tensor cost through the Engine API: outputs built on demand, samples as tensors.

Through `spec.engine.Engine`, every step used to build one Python object per
scheduled request (`SchedulerOutput`) and read the model's answer back from
one Python tuple per request. At 10,000 running requests that glue cost 20
times the tensor step it wraps. Two types move it out of the step:

* `DeferredSchedulerOutput` is a `SchedulerOutput` whose fields are built from
  the step's gathered tensors (`materialize.OutputColumns`) the first time any
  of them is read. A caller that reads them (the engine loop, the differ) gets
  the same objects as before, built once; a caller that reads only
  `total_num_scheduled_tokens`, or nothing, never pays for them. It compares
  equal to the plain output with the same fields, and pickles as one.
* `SampledTokens` is the model's answer as tensors over the engine's slots, the
  form a tensor model produces. `TorchEngine.update_from_output` takes it as
  it is; a `ModelRunnerOutput` is converted first (`TorchEngine.sampled_tokens`).
* `OutputTokens` keeps every request's output tokens in one tensor, appended
  in one write per step, and read back only for a request that finishes or
  is aborted (its `FinishedRequest`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch

from ..spec.output import SchedulerOutput
from .materialize import OutputColumns, build_outputs

FIELDS = tuple(f.name for f in fields(SchedulerOutput))


class DeferredSchedulerOutput(SchedulerOutput):
    """A `SchedulerOutput` built from `OutputColumns` on first read (see the module's docstring).

    The fields are properties that read the instance's `__dict__`, building every field into it first if it
    is not there yet. Constructed like the plain dataclass (as `dataclasses.replace` does), it holds its
    fields from the start and builds nothing.
    """

    @classmethod
    def of(cls, columns: OutputColumns, ids: list[str]) -> DeferredSchedulerOutput:
        """`ids`: the engine's slot-to-id list; it only grows, so reading it later names the same slots."""
        self = object.__new__(cls)
        self.__dict__["_columns"] = (columns, ids)
        return self

    def _build(self) -> None:
        columns, ids = self.__dict__["_columns"]
        built = build_outputs(columns, [ids])[0]
        for name in FIELDS:
            self.__dict__[name] = getattr(built, name)

    @property
    def is_built(self) -> bool:
        return FIELDS[0] in self.__dict__

    @property
    def columns(self) -> OutputColumns | None:
        """The tensors it is built from (None for one constructed from its fields): what a consumer that works
        in tensors, a tensor model among them, reads instead of the objects."""
        held = self.__dict__.get("_columns")
        return held[0] if held else None

    @property
    def total_num_scheduled_tokens(self) -> int:
        if self.is_built or self.columns is None:
            return sum(self.num_scheduled_tokens.values())
        return int(self.columns.n_sched.sum())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SchedulerOutput):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in FIELDS)

    __hash__ = None  # type: ignore[assignment]  # equal to a plain output, whose fields hold dicts

    def __reduce__(self) -> tuple[Any, ...]:
        return (SchedulerOutput, tuple(getattr(self, name) for name in FIELDS))


def _field(name: str) -> property:
    def read(self: DeferredSchedulerOutput) -> Any:
        if name not in self.__dict__:
            self._build()
        return self.__dict__[name]

    def write(self: DeferredSchedulerOutput, value: Any) -> None:  # the dataclass __init__ stores through this
        self.__dict__[name] = value

    return property(read, write)


for _name in FIELDS:
    setattr(DeferredSchedulerOutput, _name, _field(_name))


@dataclass(frozen=True)
class SampledTokens:
    """The model's answer to one step as tensors over the engine's slots: `tokens[slot, j]` is the j-th token
    the request in `slot` sampled, `count[slot]` how many it sampled (0: none, as for a partial prefill chunk).

    `tokens` is [R, G] with G = 1 + num_speculative_tokens, `count` is [R], both int64 on the engine's device;
    R may be smaller than the engine's slots (requests added since are not scheduled in this step). `pooled`
    [R] bool (a pooling model): the requests whose pooled output came back; None: none.
    """

    tokens: torch.Tensor
    count: torch.Tensor
    pooled: torch.Tensor | None = None


class OutputTokens:
    """Each slot's output tokens, as one [length, slots] int64 tensor grown by doubling.

    Position-major, because a step writes position `before[s]` of every slot it sampled for, and in a
    decode step that is about the same position for all of them: the write lands in a few contiguous rows
    instead of one cache line per slot across the whole table (at 10,000 slots, 0.3 ms a step slot-major,
    with the table out of cache). The memory is slots times the longest output so far: the price of
    appending a step's tokens in one write instead of one Python list per request.
    """

    def __init__(self, device: torch.device) -> None:
        self.tokens = torch.zeros((0, 0), dtype=torch.int64, device=device)

    def record(self, before: torch.Tensor, gen: torch.Tensor) -> None:
        """After an update: slot s had `before[s]` outputs, and the ones it kept now are the first of the tokens
        it sampled, `gen[s]` (a stop trims what follows it; outputs are never removed)."""
        R, G = gen.shape
        if R == 0:
            return
        self._reserve(int(before.max()) + G, R)
        # Every slot's G tokens go in at once, past its `before` outputs. Past the `after[s] - before[s]` it
        # kept they are scratch: `of` reads no further than a slot's count, and the next write covers them.
        at = before[None, :] + torch.arange(G, device=gen.device)[:, None]
        self.tokens[:, :R].scatter_(0, at, gen.T)

    def of(self, slots: torch.Tensor, lengths: torch.Tensor) -> list[tuple[int, ...]]:
        """The first `lengths[i]` output tokens of each slot in `slots`."""
        if slots.numel() == 0:
            return []
        self._reserve(0, int(slots.max()) + 1)
        return [tuple(row[:n]) for row, n in zip(self.tokens[:, slots].T.tolist(), lengths.tolist())]

    def _reserve(self, length: int, slots: int) -> None:
        n, r = self.tokens.shape
        if length <= n and slots <= r:
            return
        grown = self.tokens.new_zeros(
            (n if length <= n else max(length, 2 * n), r if slots <= r else max(slots, 2 * r))
        )
        grown[:n, :r] = self.tokens
        self.tokens = grown
