"""Hypothesis strategies for workloads: public API for property tests of any engine.

    from hypothesis import given
    from schedspec.conformance.workloads.strategies import workloads

    @given(workloads(family="kv-pressure"))
    def test_my_engine_matches(workload): ...

The families are those of `families.py`, drawn through Hypothesis, so
failures shrink the way Hypothesis shrinks: fewer requests, shorter prompts,
smaller numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from hypothesis import strategies as st

from ...spec.workload import Workload
from .families import FAMILIES

T = TypeVar("T")


class HypothesisDraw:
    def __init__(self, draw: st.DrawFn) -> None:
        self._draw = draw

    def int(self, lo: int, hi: int) -> int:
        return self._draw(st.integers(lo, hi))

    def choice(self, options: Sequence[T]) -> T:
        return self._draw(st.sampled_from(options))

    def bool(self) -> bool:
        return self._draw(st.booleans())


@st.composite
def _family(draw: st.DrawFn, name: str) -> Workload:
    return FAMILIES[name](HypothesisDraw(draw)).replace(name=f"hypothesis-{name}")


def workloads(family: str | None = None) -> st.SearchStrategy[Workload]:
    """Workloads of one family, or of any family when `family` is None."""
    names = [family] if family else list(FAMILIES)
    return st.one_of([_family(n) for n in names])
