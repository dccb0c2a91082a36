"""Each decision of the reference is a method an engine can override, and overriding it changes that rule alone.

`reference_impl/scheduler.py` exposes the step's decisions as thin methods
(`grant`, `victim_index`, `admission_allowed`, `check_stop`,
`freed_block_to_front`). A scheduler that overrides none of them is the
reference, step for step; one that overrides a method the way a catalogue
mutant rewrites the rule behind it runs exactly as the planted mutant does,
on every generated workload of the families that exercise it.
"""

from __future__ import annotations

import pytest

from schedspec.conformance.workloads.families import generate
from schedspec.mutants import BY_NAME, applied
from schedspec.reference_impl import ReferenceEngine, Scheduler, derived_engine, simulate
from schedspec.reference_impl.live_request import LiveRequest
from schedspec.spec import engine as engine_loop


class Same(Scheduler):
    """Overrides nothing."""


class OldestVictim(Scheduler):
    def victim_index(self) -> int:
        return 0 if self.config.policy == "fcfs" else super().victim_index()


class AdmitsAfterPreemption(Scheduler):
    def admission_allowed(self, num_preempted: int) -> bool:
        return True


class CachedBlocksFirst(Scheduler):
    def freed_block_to_front(self, block: int) -> bool:
        return True


class ConfiguredThreshold(Scheduler):
    def grant(self, request: LiveRequest, long_prefill_token_threshold: int, token_budget: int) -> int:
        return super().grant(request, self.config.long_prefill_token_threshold, token_budget)


# (override, the catalogue mutant it restates, the families that exercise it)
RESTATED = [
    (OldestVictim, "wrong-victim", ("kv-pressure", "budget")),
    (AdmitsAfterPreemption, "Z10-admit-after-preemption", ("kv-pressure", "priority")),
    (CachedBlocksFirst, "hashed-freed-to-front", ("prefix-caching",)),
    (ConfiguredThreshold, "running-threshold-when-alone", ("threshold",)),
]


def _workloads(families, n=25):
    return [generate(f, 3, i) for f in families for i in range(n)]


def _run(engine, w):
    """The step records, and the exception that ended the run early if one did (vLLM's asserts, kept)."""
    records = []
    try:
        for rec in engine_loop.steps(engine, w):
            records.append(rec)
    except AssertionError as e:
        return records, f"AssertionError at line {_last_line(e)}"
    return records, None


def _last_line(e):
    tb = e.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_lineno


def test_overriding_nothing_is_the_reference():
    engine = derived_engine(Same)
    for w in _workloads(("budget", "kv-pressure", "priority", "prefix-caching", "spec-decode", "async"), 10):
        assert engine_loop.run(engine(w.config), w).steps == simulate(w).steps


@pytest.mark.parametrize("cls,mutant,families", RESTATED, ids=[m for _, m, _ in RESTATED])
def test_one_override_runs_as_the_planted_mutant(cls, mutant, families):
    engine = derived_engine(cls)
    differs = 0
    for w in _workloads(families):
        with applied(BY_NAME[mutant]):
            planted = _run(ReferenceEngine(w.config), w)
        derived = _run(engine(w.config), w)
        assert derived == planted, w.name
        differs += derived != _run(ReferenceEngine(w.config), w)
    assert differs, f"{mutant}: no workload showed the change"


def test_a_derived_engine_is_named_and_carries_its_families():
    engine = derived_engine(CachedBlocksFirst, "cached-first", ("prefix-caching",))
    assert engine.name == "cached-first" and engine.families == ("prefix-caching",)
    w = generate("async", 0, 1)  # async: the scheduler gets AsyncScheduler's placeholders on top of the override
    assert w.config.async_scheduling
    inner = engine(w.config).scheduler
    assert isinstance(inner, CachedBlocksFirst) and type(inner).__name__ == "AsyncCachedBlocksFirst"
