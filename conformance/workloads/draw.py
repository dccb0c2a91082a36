"""`Draw`: the three questions a family asks of its randomness, and the seeded answer to them.

Every family is written against this interface, so the same family is drawn
from a seeded `random.Random` in a campaign (`RandomDraw`, reproducible and
shardable) and from Hypothesis in property tests (`strategies.HypothesisDraw`,
with Hypothesis's shrinking). It has a module of its own because the edge
and mixed families need it as much as the catalogue that registers them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")


class Draw(Protocol):
    def int(self, lo: int, hi: int) -> int: ...

    def choice(self, options: Sequence[T]) -> T: ...

    def bool(self) -> bool: ...


class RandomDraw:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def bool(self) -> bool:
        return self.rng.random() < 0.5
