"""Search budgets: a verdict is decided by counts, never by how loaded the machine is.

A search that decides whether a checker catches a bug is bounded by a count
of examples, searched in a fixed order from a fixed seed: the first N
generated workloads (`hunt.hunt`), N Hypothesis examples, derandomized
(`state_machine_hunt.kill_by_state_machine`), a Z3 resource limit (`rlimit`)
per query, a CrossHair iteration count. The same count gives the same
examples, and so the same verdict, on a quiet laptop and on a CI runner
with a load of 6; only the seconds differ.

Seconds survive only as a safety cap (`SafetyCap`), so that a search never
runs forever. A search the cap stops before its count is done raises
`SearchCut`: its verdict is *unknown* ("budget spent"), never "survived",
because it says nothing about the examples it did not reach.

Shrinking a finding is bounded by a count of candidates too
(`shrink.shrink(max_calls=...)`); its seconds cap costs only size, never
the verdict.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# Examples per search when the caller names none: about 7 s of monitors, 14 s of differ and 17 s of state
# machine on one core of the 2-core CI machine, for a search that finds nothing.
DEFAULT_EXAMPLES = 1000
# Z3's resource limit per query (`rlimit`, deterministic work units). The unmutated encodings need at most
# 5 million per query at N <= 3 (core) and about as much with a feature on; ten times that leaves room.
DEFAULT_Z3_RLIMIT = 50_000_000
# The safety cap, in seconds, when the caller names none: far beyond what a count takes even at load 6.
DEFAULT_CAP_S = 900.0


class SearchCut(Exception):
    """The safety cap stopped a search before its count of examples was done: the verdict is unknown."""

    def __init__(self, done: int, planned: int, cap_s: float) -> None:
        super().__init__(f"budget spent: {done} of {planned} examples searched before the {cap_s:g} s safety cap")
        self.done, self.planned, self.cap_s = done, planned, cap_s


@dataclass
class SafetyCap:
    """Wall-clock seconds a search may take before it is cut short (`None`: no cap)."""

    seconds: float | None
    started: float = field(default_factory=time.perf_counter)

    @property
    def deadline(self) -> float:
        return math.inf if self.seconds is None else self.started + self.seconds

    def spent(self) -> bool:
        return time.perf_counter() > self.deadline

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def cut(self, done: int, planned: int) -> SearchCut:
        return SearchCut(done, planned, math.inf if self.seconds is None else self.seconds)


@contextmanager
def z3_rlimit(rlimit: int) -> Iterator[None]:
    """Every Z3 solver made inside gets `rlimit` work units per query (Z3's global `rlimit`): a query stops at
    the same point on any machine, where a timeout stops wherever the load leaves it. At the limit it answers
    `unknown`, which the proofs report as unknown, never as proved."""
    import z3

    z3.set_param("rlimit", rlimit)
    try:
        yield
    finally:
        z3.set_param("rlimit", 0)  # 0: no limit, Z3's default
