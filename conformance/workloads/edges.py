"""Release edges: workloads drawn where vLLM's releases part under speculative decoding.

The spec-decode family reaches most of what changed between 0.28.0 and
0.33.0 by chance, but three rules sit where chance almost never goes: each
needs a prefix hit at an exact length, or a later prompt that continues
what accepted drafts wrote, at an exact step. A 1,000-workload campaign of
the other families reached `padding-needs-room-to-sample` zero times, so a
changelog between 0.28.0 and 0.29.0 could not have seen it. These shapes
put the scheduler on each edge, with the sizes (block size, k, the number
of blocks hit, L, arrivals) drawn, so a campaign meets each rule at many
points rather than at one canned workload (`conformance/workloads/release_examples.py`
keeps those, one per rule, for the docs and the tests):

* `one-token-admission`: request `a` leaves m whole blocks cached and
  finishes; `b` arrives later with the same m blocks and one more token,
  so its admission has one token left. With a decoding request `r` beside
  it, the admission is decode-like at every release; alone, only from
  0.30.0 (`padding-after-prefix-hit`). With L within k of its length, the
  1 + k padded tokens run into L: before 0.29.0 the waiting pass stops
  there, from 0.29.0 `b` goes in unpadded (`padding-needs-room-to-sample`).
* `continued-after-drafts`: `a` decodes with drafts accepted, and `b`'s
  prompt continues `a`'s prompt and outputs. Whether the block that the
  accepted drafts filled is cached when `b` arrives is the sync
  scheduler's change in 0.33.0 (`sync-spec-decode-caches-on-update`).

The spec-decode family draws one of these in every fourth workload of a
campaign (`WithEdges`); the rest of its workloads are as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ...spec.config import SchedulerConfig
from ...spec.request import Request
from ...spec.workload import Workload, WorkloadRequest

if TYPE_CHECKING:
    from .draw import Draw

EDGE_MAX_STEPS = 40


def _tokens(d: Draw, n: int) -> tuple[int, ...]:
    return tuple(d.int(10, 14) for _ in range(n))


def one_token_admission(d: Draw) -> Workload:
    bs, k, m = d.choice([2, 4, 8]), d.int(1, 4), d.int(1, 3)
    T = m * bs + 1  # m whole blocks and one token: a full hit leaves exactly one
    near_L = d.bool()
    L = T + d.int(1, k) if near_L else d.int(T + k + 2, 64)
    prompt = _tokens(d, T)
    reqs = [WorkloadRequest(Request("a", prompt, max_tokens=1, ignore_eos=True))]
    if d.bool():  # a decode running beside the admission
        r_len = d.int(1, min(bs, L - 1))
        reqs.append(WorkloadRequest(Request("r", _tokens(d, r_len), max_tokens=d.int(4, 12), ignore_eos=True), 1))
    b = Request("b", prompt[: m * bs] + (d.int(15, 19),), max_tokens=d.int(1, 3), ignore_eos=True)
    reqs.append(WorkloadRequest(b, d.int(2, 4)))
    config = SchedulerConfig(
        max_num_batched_tokens=d.int(max(T, 1 + k), 64),
        max_num_seqs=d.int(2, 4),
        max_model_len=L,
        block_size=bs,
        num_gpu_blocks=2 * (-(-L // bs)) + d.int(2, 6),
        policy=d.choice(["fcfs", "fcfs", "priority"]),
        enable_prefix_caching=True,
        num_speculative_tokens=k,
    )
    return Workload(config, tuple(reqs), max_steps=EDGE_MAX_STEPS)


def continued_after_drafts(d: Draw) -> Workload:
    bs, k = d.choice([2, 4]), d.int(1, 3)
    prompt, outputs = _tokens(d, d.int(1, 2 * bs)), tuple(d.int(20, 29) for _ in range(d.int(k + 2, 10)))
    proposals = tuple((k, d.int(1, k)) for _ in range(d.int(1, 3)))
    a = WorkloadRequest(
        Request("a", prompt, max_tokens=len(outputs), ignore_eos=True),
        output_token_ids=outputs,
        spec_proposals=proposals,
    )
    turn = prompt + outputs[: d.int(1, len(outputs))] + (d.int(30, 39),)
    b = WorkloadRequest(Request("b", turn, max_tokens=d.int(1, 3), ignore_eos=True), d.int(2, 5))
    config = SchedulerConfig(
        max_num_batched_tokens=64,
        max_model_len=64,
        block_size=bs,
        num_gpu_blocks=d.int(24, 40),
        policy=d.choice(["fcfs", "priority"]),
        enable_prefix_caching=True,
        num_speculative_tokens=k,
    )
    return Workload(config, (a, b), max_steps=EDGE_MAX_STEPS)


EDGES: tuple[Callable[..., Workload], ...] = (one_token_admission, continued_after_drafts)


def release_edge(d: Draw) -> Workload:
    return d.choice(EDGES)(d)


class WithEdges:
    """A family whose every `strata`-th workload of a campaign is a release edge (`generate` passes
    `index % strata`); Hypothesis (`strategies.py`) calls it with a draw alone, and the stratum is drawn."""

    strata = 4

    def __init__(self, family: Callable[..., Workload]) -> None:
        self.family, self.__name__ = family, family.__name__

    def __call__(self, d: Draw, stratum: int | None = None) -> Workload:
        if (d.int(0, self.strata - 1) if stratum is None else stratum) == self.strata - 1:
            return release_edge(d)
        return self.family(d)
