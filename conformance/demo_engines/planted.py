"""Planted divergences and broken engines: how the harness is shown to catch what it claims to.

`perturbed(field, step)` wraps the reference and changes one observable at
one step; a differ that misses it, reports it at the wrong step, or fails to
shrink it is broken. `crashing`, `hanging` and `malformed` engines fail in
the three ways a real engine can, and the harness must report each at its
step instead of crashing. All are engine factories, so they also work from
the command line as `schedspec.conformance.demo_engines.planted:NAME`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from ...reference_impl import ReferenceEngine
from ...spec.config import SchedulerConfig
from ...spec.engine import EngineFactory
from ...spec.output import SchedulerOutput
from ...spec.trace import StateSummary


def _perturb_output(field: str, out: SchedulerOutput) -> SchedulerOutput:
    if field == "tokens":  # one more token for the last scheduled request
        items = list(out.num_scheduled_tokens.items())
        if items:
            rid, n = items[-1]
            items[-1] = (rid, n + 1)
        return dataclasses.replace(out, num_scheduled_tokens=dict(items))
    if field == "order":  # the same grants, in reverse order
        return dataclasses.replace(out, num_scheduled_tokens=dict(reversed(list(out.num_scheduled_tokens.items()))))
    if field == "block_ids":  # the first new request gets a different last block
        if out.scheduled_new_reqs:
            first = out.scheduled_new_reqs[0]
            bumped = dataclasses.replace(first, block_ids=first.block_ids[:-1] + (first.block_ids[-1] + 1000,))
            return dataclasses.replace(out, scheduled_new_reqs=(bumped,) + out.scheduled_new_reqs[1:])
        return out
    if field == "preempted":
        return dataclasses.replace(out, preempted_req_ids=out.preempted_req_ids | {"ghost"})
    return out


def _perturb_summary(field: str, s: StateSummary) -> StateSummary:
    if field == "free_blocks":
        return dataclasses.replace(s, num_free_blocks=s.num_free_blocks + 1)
    if field == "waiting_order" and len(s.waiting) > 1:
        return dataclasses.replace(s, waiting=tuple(reversed(s.waiting)))
    return s


OUTPUT_FIELDS = ("tokens", "order", "block_ids", "preempted")
SUMMARY_FIELDS = ("free_blocks", "waiting_order")


class PerturbedEngine(ReferenceEngine):
    """The reference, except that one observable is wrong at one step (or at every step from it on)."""

    name = "perturbed"

    def __init__(self, config: SchedulerConfig, field: str, step: int) -> None:
        super().__init__(config)
        self.field, self.at_step, self.step = field, step, -1

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        self.step += 1
        out = super().schedule(throttle_prefills)
        return _perturb_output(self.field, out) if self.step == self.at_step and self.field in OUTPUT_FIELDS else out

    def summary(self) -> StateSummary:
        s = super().summary()
        return _perturb_summary(self.field, s) if self.step == self.at_step and self.field in SUMMARY_FIELDS else s


def perturbed(field: str, step: int) -> EngineFactory:
    return lambda config: PerturbedEngine(config, field, step)


class FailingAt(ReferenceEngine):
    name = "failing"

    def __init__(self, config: SchedulerConfig, step: int, fail: Callable[[], object]) -> None:
        super().__init__(config)
        self.at_step, self.step, self.fail = step, -1, fail

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        self.step += 1
        if self.step == self.at_step:
            return self.fail()  # type: ignore[return-value]
        return super().schedule(throttle_prefills)


def _raise() -> object:
    raise RuntimeError("planted crash")


def crashing(config: SchedulerConfig, step: int = 2) -> ReferenceEngine:
    return FailingAt(config, step, _raise)


def hanging(config: SchedulerConfig, step: int = 2) -> ReferenceEngine:
    return FailingAt(config, step, lambda: time.sleep(3600))


def malformed(config: SchedulerConfig, step: int = 2) -> ReferenceEngine:
    return FailingAt(config, step, lambda: {"num_scheduled_tokens": "not an output"})


# Named factories for `--engine schedspec.conformance.demo_engines.planted:NAME`.
extra_token_at_step_3 = perturbed("tokens", 3)
ghost_preemption_at_step_1 = perturbed("preempted", 1)
