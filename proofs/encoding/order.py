"""Orders among slots: the PRIORITY victim key, the waiting heap's order, and positions counted from flags.

A slot's `arrival` is the rank of its arrival time and `id_rank` the rank of its request id, which order the keys
as the times and ids do; the keys themselves are `spec.rules`', the ones the reference and the monitors use.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...spec.arith import ite, lex_eq, lex_gt, lex_lt
from ...spec.rules import heap_key, victim_key
from .state import Bool, Int, Slot


def count(flags: Iterable[Bool]) -> Int:
    """How many of `flags` hold: a position is the number of slots before it."""
    total: Any = 0
    for f in flags:
        total = total + ite(f, 1, 0)
    return total


def key_gt(a: Slot, b: Slot) -> Bool:
    """`a`'s victim key (`spec.rules.victim_key`) is strictly larger: PRIORITY preempts `a` before `b`."""
    return lex_gt(victim_key(a.priority, a.arrival), victim_key(b.priority, b.arrival))


def key_eq(a: Slot, b: Slot) -> Bool:
    return lex_eq(victim_key(a.priority, a.arrival), victim_key(b.priority, b.arrival))


def heap_before(a: Slot, b: Slot) -> Bool:
    """`a` pops first from the PRIORITY heap (`spec.rules.heap_key`, with the id's rank for the id)."""
    return lex_lt(heap_key(a.priority, a.arrival, a.id_rank), heap_key(b.priority, b.arrival, b.id_rank))
