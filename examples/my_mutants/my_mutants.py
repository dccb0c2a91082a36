"""Mutants of your own: engines derived from schedspec's reference, one changed decision each.

`schedspec mutants --from my_mutants` scores each engine listed in `ENGINES`
by every checker that takes an engine: the invariant monitors on its trace,
the differ against the reference, and the lock-step state machine (with this
folder on PYTHONPATH):

    PYTHONPATH=examples/my_mutants schedspec mutants --from my_mutants --examples 200

`schedspec hunt --engine my_mutants:OLDEST_VICTIM` hunts one of them alone.

Each engine subclasses the reference's `Scheduler` and overrides one of its
decision methods, so it changes one rule and nothing else:

* `grant(request, long_prefill_token_threshold, token_budget)`: a RUNNING request's tokens at its turn;
* `victim_index()`: where in `self.running` the request to preempt sits;
* `admission_allowed(num_preempted)`: whether the WAITING pass runs this step;
* `check_stop(request)`: whether a request stops after the token just appended (sets its status);
* `freed_block_to_front(block)`: whether a released block is reused first or kept at the tail for the cache.

`derived_engine(cls, name, families)` wraps the scheduler as an engine
factory. `families` names the workload families that exercise the change
(`schedspec.conformance.workloads.families`); without it the core scope's nine are
searched. A docstring's first line is the engine's description.
"""

from __future__ import annotations

from schedspec.reference_impl import Scheduler, derived_engine
from schedspec.reference_impl.live_request import LiveRequest


class IgnoresThreshold(Scheduler):
    """A running request's chunk is not clamped by the long-prefill threshold."""

    def grant(self, request: LiveRequest, long_prefill_token_threshold: int, token_budget: int) -> int:
        return super().grant(request, 0, token_budget)


class OldestVictim(Scheduler):
    """FCFS preempts the oldest running request instead of the newest."""

    def victim_index(self) -> int:
        return 0 if self.config.policy == "fcfs" else super().victim_index()


class AdmitsAfterPreemption(Scheduler):
    """The waiting pass runs even in a step that preempted (bug-zoo Z10, written as an override)."""

    def admission_allowed(self, num_preempted: int) -> bool:
        return True


class MinTokensHoldsEos(Scheduler):
    """EOS and stop tokens do not finish a request below min_tokens (vLLM lets them; T32)."""

    def check_stop(self, request: LiveRequest) -> bool:
        if request.num_output_tokens < request.request.min_tokens:
            return False
        return super().check_stop(request)


class CachedBlocksFirst(Scheduler):
    """Every released block is reused first, cached ones too, so prefixes are evicted most recently used first."""

    def freed_block_to_front(self, block: int) -> bool:
        return True


IGNORES_THRESHOLD = derived_engine(IgnoresThreshold, "ignores-threshold", ("threshold",))
OLDEST_VICTIM = derived_engine(OldestVictim, "oldest-victim", ("kv-pressure",))
ADMITS_AFTER_PREEMPTION = derived_engine(AdmitsAfterPreemption, "admits-after-preemption")
MIN_TOKENS_HOLDS_EOS = derived_engine(MinTokensHoldsEos, "min-tokens-holds-eos", ("stops",))
CACHED_BLOCKS_FIRST = derived_engine(CachedBlocksFirst, "cached-blocks-first", ("prefix-caching",))

ENGINES = {
    "ignores-threshold": IGNORES_THRESHOLD,
    "oldest-victim": OLDEST_VICTIM,
    "admits-after-preemption": ADMITS_AFTER_PREEMPTION,
    "min-tokens-holds-eos": MIN_TOKENS_HOLDS_EOS,
    "cached-blocks-first": CACHED_BLOCKS_FIRST,
}
